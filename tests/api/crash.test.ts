// A crash of the service as `npm start` runs it (src/main.ts): an exception nothing caught, or a
// rejection nothing handled, is logged through the service's logger (no credential an error
// carries in its members) and ends the process with code 1.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/devnet/index.js';
import { testDialect } from '../helpers/db.js';

const PASSWORD = 'crash-test-password-5b1e';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
    const port = await freePort();
    const child = spawn(process.execPath, ['--import', 'tsx', '--import', inject, 'src/main.ts'], {
      env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: `sqlite:${join(dir, `db-${port}.sqlite`)}`, LOG_LEVEL: 'info', CRASH_KIND: kind },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (err += c.toString('utf8')));
    const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
    for (let i = 0; !(await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)); i++) {
      if (i > 300) throw new Error('the service did not start');
      await sleep(100);
    }
    child.kill('SIGUSR2');
    const code = await exited;
    return { code, out, err };
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
