// What a library prints with console while the service runs (the x402 SDK warns there when the
// facilitator fails, quoting its answer) comes out as the service's own log lines: JSON, at the
// matching level, with the credentials of the configured URLs left out like every other line.
import { createServer } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { testDialect } from '../helpers/db.js';
import { startServiceProcess } from '../helpers/service-process.js';

const KEY = 'fac1l1tatorKey7Qx2Lm9Rt';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(testDialect !== 'sqlite')('console output of libraries', () => {
  const dir = mkdtempSync(join(tmpdir(), 'paywarden-console-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is logged as JSON at its level, without the facilitator URL key the facilitator echoed', async () => {
    // A facilitator that fails /supported and quotes the path it was asked (its API key in it).
    const facilitator = createServer((req, res) => res.writeHead(500).end(`no route for ${req.url}`));
    await new Promise<void>((done) => facilitator.listen(0, '127.0.0.1', done));
    const facilitatorPort = (facilitator.address() as { port: number }).port;
    const service = await startServiceProcess(
      {
        DATABASE_URL: `sqlite:${join(dir, 'db.sqlite')}`,
        LOG_LEVEL: 'info',
        FACILITATOR_URL: `http://127.0.0.1:${facilitatorPort}/${KEY}`,
        PAY_TO: '0x5555555555555555555555555555555555555555',
      },
      { capture: true },
    ).catch((err: unknown) => {
      facilitator.close();
      throw err;
    });
    try {
      const res = await fetch(`${service.url}/api/quick-check`);
      expect(res.status).toBe(502);
      await sleep(200);
    } finally {
      service.child.kill('SIGTERM');
      await service.exited;
      facilitator.close();
    }
    const out = service.out();
    const err = service.err();
    expect(out + err).not.toContain(KEY);
    expect(err).toBe('');
    const lines = out.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { level: number; msg: string; source?: string });
    const warned = lines.find((l) => l.msg.includes('Failed to fetch supported kinds from facilitator'));
    expect(warned).toMatchObject({ level: 40, source: 'console' });
    expect(warned!.msg).toContain('no route for /');
  });
});
