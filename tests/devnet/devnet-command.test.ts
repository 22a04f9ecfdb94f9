// `npm run devnet` as a process: the signals that stop it, and a stderr nobody reads any more.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../src/devnet/index.js';

/** The devnet as `npm run devnet` runs it; resolves with its ready line once it prints it. */
async function startDevnetCommand(env: Record<string, string>) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/devnet/main.ts'], {
    env: { ...process.env, PORT: String(await freePort()), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  let out = '';
  const ready = await new Promise<{ service: string; env: { DATABASE_URL: string } }>((done, fail) => {
    child.stdout!.on('data', (d) => {
      out += d;
      const line = /^devnet ready (.*)$/m.exec(out);
      if (line) done(JSON.parse(line[1]!));
    });
    void exited.then((code) => fail(new Error(`the devnet exited (${code}) before it was ready`)));
  });
  return { child, exited, ready, tempDir: dirname(ready.env.DATABASE_URL.slice('sqlite:'.length)) };
}

describe('npm run devnet, as a process', () => {
  it('stops on SIGHUP (a closed terminal) as on Ctrl-C: exit 0, its temporary database removed', async () => {
    const d = await startDevnetCommand({});
    expect(existsSync(d.tempDir)).toBe(true);
    d.child.kill('SIGHUP');
    expect(await d.exited).toBe(0);
    expect(existsSync(d.tempDir)).toBe(false);
  }, 120_000);

  it('goes on serving when the reader of its stderr goes away (`2>&1 | grep -m1 ready`)', async () => {
    const d = await startDevnetCommand({ LOG_LEVEL: 'info' });
    d.child.stderr!.destroy();
    // Every request is logged (info), to a pipe nobody reads any more.
    for (let i = 0; i < 5; i++) expect((await fetch(`${d.ready.service}/healthz`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    expect((await fetch(`${d.ready.service}/healthz`)).status).toBe(200);
    d.child.kill('SIGTERM');
    expect(await d.exited).toBe(0);
    expect(existsSync(d.tempDir)).toBe(false);
  }, 120_000);
});
