// A crash of the service as `npm start` runs it (src/main.ts): an exception nothing caught, or a
// rejection nothing handled, is logged through the service's logger (no credential an error
// carries in its members) and ends the process with code 1.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { testDialect } from '../helpers/db.js';
import { startServiceProcess } from '../helpers/service-process.js';

const PASSWORD = 'crash-test-password-5b1e';

describe.skipIf(testDialect !== 'sqlite')('a crash', () => {
  const dir = mkdtempSync(join(tmpdir(), 'paywarden-crash-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // Loaded before the service: on SIGUSR2 it fails the way a bug in a callback would, with an
  // error shaped like ioredis's (the refused AUTH and its password among its members).
  const inject = join(dir, 'crash-on-signal.mjs');
  writeFileSync(
    inject,
    `process.on('SIGUSR2', () => {
       const err = Object.assign(new Error('Connection is closed.'), { command: { name: 'auth', args: [${JSON.stringify(PASSWORD)}] } });
       if (process.env.CRASH_KIND === 'rejection') Promise.reject(err);
       else throw err;
     });`,
  );

  async function crash(kind: 'exception' | 'rejection') {
    const service = await startServiceProcess({ DATABASE_URL: `sqlite:${join(dir, `db-${kind}.sqlite`)}`, LOG_LEVEL: 'info', CRASH_KIND: kind }, { preload: [inject], capture: true });
    service.child.kill('SIGUSR2');
    const code = await service.exited;
    return { code, out: service.out(), err: service.err() };
  }

  for (const kind of ['exception', 'rejection'] as const) {
    it(`an uncaught ${kind} is logged at fatal without the credentials in the error's members, and ends the process with 1`, async () => {
      const { code, out, err } = await crash(kind);
      expect(code).toBe(1);
      expect(out + err).not.toContain(PASSWORD);
      const fatal = out
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { level: number; msg: string; origin?: string; err?: { message?: string; command?: unknown } })
        .find((l) => l.level === 60);
      expect(fatal).toMatchObject({
        msg: 'crashed: the process ends',
        origin: kind === 'exception' ? 'uncaughtException' : 'unhandledRejection',
        err: { message: 'Connection is closed.', command: { name: 'auth', args: '[redacted]' } },
      });
    });
  }
});
