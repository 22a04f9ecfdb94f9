// What a library prints with console while the service runs (the x402 SDK warns there when the
// facilitator fails, quoting its answer) comes out as the service's own log lines: JSON, at the
// matching level, with the credentials of the configured URLs left out like every other line.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/devnet/index.js';
import { testDialect } from '../helpers/db.js';

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
    const port = await freePort();
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      env: {
        ...process.env,
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: `sqlite:${join(dir, 'db.sqlite')}`,
        LOG_LEVEL: 'info',
        FACILITATOR_URL: `http://127.0.0.1:${facilitatorPort}/${KEY}`,
        PAY_TO: '0x5555555555555555555555555555555555555555',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (err += c.toString('utf8')));
    const exited = new Promise((done) => child.once('exit', done));
    try {
      for (let i = 0; !(await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)); i++) {
        if (i > 300) throw new Error(`the service did not start: ${err}`);
        await sleep(100);
      }
      const res = await fetch(`http://127.0.0.1:${port}/api/quick-check`);
      expect(res.status).toBe(502);
      await sleep(200);
    } finally {
      child.kill('SIGTERM');
      await exited;
      facilitator.close();
    }
    expect(out + err).not.toContain(KEY);
    expect(err).toBe('');
    const lines = out.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { level: number; msg: string; source?: string });
    const warned = lines.find((l) => l.msg.includes('Failed to fetch supported kinds from facilitator'));
    expect(warned).toMatchObject({ level: 40, source: 'console' });
    expect(warned!.msg).toContain('no route for /');
  });
});
