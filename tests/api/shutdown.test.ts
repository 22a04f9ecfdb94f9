// Shutdown of the service as `npm start` runs it (src/main.ts), with SIGTERM: a request in
// progress is answered, one that arrives on an open connection meanwhile gets a problem body,
// and a client that stopped sending mid-body cannot keep the process alive.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { EVALUATE_BODY } from '../../bench/targets/evaluate.js';
import { freePort } from '../../src/devnet/index.js';
import { testDialect } from '../helpers/db.js';

const FACILITATOR_TIMEOUT_MS = 1000;
const RPC_TIMEOUT_MS = 1000;
/** src/main.ts: a shutdown closes the connections left 2 × FACILITATOR_TIMEOUT_MS + RPC_TIMEOUT_MS + 5 s after it began. */
const DEADLINE_MS = 2 * FACILITATOR_TIMEOUT_MS + RPC_TIMEOUT_MS + 5000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(testDialect !== 'sqlite')('SIGTERM', () => {
  const dir = mkdtempSync(join(tmpdir(), 'paywarden-shutdown-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** The service as `npm start` runs it, on its own port; resolves once it answers. */
  async function start(opts: { logLevel?: string; stdout?: 'ignore' | 'pipe' } = {}) {
    const port = await freePort();
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: `sqlite:${join(dir, `db-${port}.sqlite`)}`, LOG_LEVEL: opts.logLevel ?? 'silent', FACILITATOR_TIMEOUT_MS: String(FACILITATOR_TIMEOUT_MS), RPC_TIMEOUT_MS: String(RPC_TIMEOUT_MS) },
      stdio: ['ignore', opts.stdout ?? 'ignore', 'ignore'],
    });
    const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
    for (let i = 0; ; i++) {
      const up = await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false);
      if (up) break;
      if (i > 300) throw new Error('the service did not start');
      await sleep(100);
    }
    const open = () =>
      new Promise<{ socket: Socket; received: () => string; closed: Promise<void> }>((done) => {
        let text = '';
        const socket = connect(port, '127.0.0.1', () => done({ socket, received: () => text, closed }));
        const closed = new Promise<void>((c) => socket.once('close', () => c()));
        socket.on('data', (d) => (text += d.toString('utf8')));
        socket.on('error', () => {});
      });
    return { child, exited, open, port };
  }
  const body = JSON.stringify(EVALUATE_BODY);
  const head = `POST /api/spendpolicy/evaluate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;

  it('answers the request in progress, refuses what comes after with 503 shutting_down, and ends despite a stalled client', async () => {
    const { child, exited, open } = await start();
    try {
      // One client is in the middle of its request; another has stopped sending for good.
      const busy = await open();
      const stalled = await open();
      busy.socket.write(head + body.slice(0, 10));
      stalled.socket.write(head + body.slice(0, 10));
      await sleep(300);

      const termAt = Date.now();
      child.kill('SIGTERM');
      await sleep(300);
      // The request in progress completes; the next one on its connection is turned away.
      busy.socket.write(body.slice(10) + 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');

      expect(await exited).toBe(0);
      const took = Date.now() - termAt;
      // The stalled client kept its connection open until the deadline, and not beyond.
      expect(took).toBeGreaterThanOrEqual(DEADLINE_MS - 500);
      expect(took).toBeLessThan(DEADLINE_MS + 3000);
      const answers = busy.received().split(/(?=HTTP\/1\.1 )/);
      expect(answers[0]).toMatch(/^HTTP\/1\.1 200 /);
      expect(answers[0]).toContain('"decision":"APPROVE"');
      expect(answers[1]).toMatch(/^HTTP\/1\.1 503 /);
      expect(answers[1]).toMatch(/content-type: application\/problem\+json/i);
      expect(answers[1]).toMatch(/retry-after: 1/i);
      expect(answers[1]).toContain('"code":"shutting_down"');
      expect(stalled.received()).toBe('');
    } finally {
      child.kill('SIGKILL');
    }
  }, 60_000);

  it('closes a keep-alive connection once its request in progress is answered, saying so in that answer, and ends without waiting for the deadline', async () => {
    const { child, exited, open } = await start();
    try {
      const busy = await open();
      busy.socket.write(head + body.slice(0, 10));
      await sleep(300);
      const termAt = Date.now();
      child.kill('SIGTERM');
      await sleep(300);
      busy.socket.write(body.slice(10));
      await busy.closed;
      // Connection: close, so the client sends no next request into a connection about to close.
      const [headers] = busy.received().split('\r\n\r\n');
      expect(headers).toMatch(/^HTTP\/1\.1 200 /);
      expect(headers).toMatch(/^connection: close$/im);
      expect(headers).not.toMatch(/keep-alive/i);
      expect(await exited).toBe(0);
      expect(Date.now() - termAt).toBeLessThan(DEADLINE_MS - 3000);
    } finally {
      child.kill('SIGKILL');
    }
  }, 60_000);

  it('stops as gracefully on SIGHUP (the terminal it was started from went away)', async () => {
    const { child, exited } = await start();
    child.kill('SIGHUP');
    expect(await exited).toBe(0);
  });

  it('ends even when its log goes to a pipe nobody reads', async () => {
    // stdout is a pipe this test never reads: once it is full, pino's last write at exit waits.
    const { child, exited, port } = await start({ logLevel: 'info', stdout: 'pipe' });
    child.stdout!.pause();
    for (let i = 0; i < 600; i++) await fetch(`http://127.0.0.1:${port}/healthz`);
    const termAt = Date.now();
    child.kill('SIGTERM');
    const ended = await Promise.race([exited.then(() => true), sleep(20_000).then(() => false)]);
    if (!ended) child.kill('SIGKILL');
    expect(ended).toBe(true);
    expect(Date.now() - termAt).toBeLessThan(15_000);
  }, 60_000);

  it('a database it cannot open stops the start with a message naming DATABASE_URL and the file', async () => {
    const file = join(dir, 'not-a-database.sqlite');
    writeFileSync(file, 'these are not the pages of an SQLite database, but they are long enough to be read as a header');
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { env: { ...process.env, PORT: String(await freePort()), DATABASE_URL: `sqlite:${file}` }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (d) => (stderr += d));
    expect(await new Promise((done) => child.once('exit', done))).toBe(1);
    expect(stderr.trim()).toBe(`paywarden: cannot open DATABASE_URL=sqlite:${file}: file is not a database`);
  });

  it('a database file another process holds locked stops the start with a message naming the file and the cause', async () => {
    const file = join(dir, 'locked.sqlite');
    const holder = new SQLite(file);
    try {
      holder.pragma('journal_mode = WAL');
      holder.exec('create table held (x); begin immediate; insert into held values (1)');
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { env: { ...process.env, PORT: String(await freePort()), DATABASE_URL: `sqlite:${file}` }, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr!.on('data', (d) => (stderr += d));
      expect(await new Promise((done) => child.once('exit', done))).toBe(1);
      expect(stderr).toContain('database is locked');
      expect(stderr.split(`DATABASE_URL=sqlite:${file}`).length).toBe(2); // named once
      expect(stderr).toContain('another process holds its write lock');
    } finally {
      holder.close();
    }
  }, 30_000);
});
