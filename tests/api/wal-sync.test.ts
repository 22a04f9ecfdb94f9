import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { sql } from 'kysely';
import { openDatabase } from '../../src/platform/db/database.js';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WalSync } from '../../src/platform/db/wal-sync.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';
import { bearer, createBody, createPolicy, decideRaw, getPolicy, putPolicy, readDecision, rid, rotateAgentKey, rules, START } from '../helpers/policies.js';
import { expectProblem } from '../helpers/problems.js';

// SQLite only: a write transaction (such as a batch of protected decisions) commits without syncing the WAL on the event loop,
// and is answered only once an fdatasync of the WAL on the thread pool has finished.

/** A sync the test holds until it calls release(), or fails with fail(). */
function gate() {
  let release!: () => void;
  let fail!: (err: Error) => void;
  const done = new Promise<void>((res, rej) => {
    release = res;
    fail = rej;
  });
  return { done, release, fail };
}

const syncOnce = () => vi.spyOn(WalSync.prototype as unknown as { syncOnce(): Promise<void> }, 'syncOnce');

/** Whether a promise has settled by now (after the event loop has had time to move on). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setTimeout(r, 50));
  return done;
}

describe.skipIf(testDialect !== 'sqlite')('SQLite commits synced off the event loop', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    vi.restoreAllMocks();
    await t?.close();
    t = undefined;
  });

  async function app() {
    t = await createTestApp();
    t.clock.set(START);
    return t;
  }

  it('answers a decision only once its commit is on disk, while other requests are served meanwhile', async () => {
    const t = await app();
    const p = await createPolicy(t);
    const held = gate();
    const original = (WalSync.prototype as unknown as { syncOnce(): Promise<void> }).syncOnce;
    syncOnce().mockImplementationOnce(async function (this: WalSync) {
      await held.done;
      return original.call(this);
    });

    const pending = decideRaw(t, p, { requestId: rid('held'), amount: '1' });
    let stored: Array<{ id: string }>;
    try {
      expect(await settled(pending)).toBe(false);
      // Committed, not yet acknowledged; the event loop still serves other requests.
      stored = await t.database.db.selectFrom('decisions').select(['id', 'decision']).where('policy_id', '=', p.policyId).execute();
      expect(stored).toHaveLength(1);
      expect((await t.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    } finally {
      held.release();
    }
    const res = await pending;
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).decision).toMatchObject({ decisionId: stored[0]!.id, decision: 'APPROVE' });
  });

  it('leaves statements outside write transactions synced (synchronous=FULL) after a batch', async () => {
    const t = await app();
    const p = await createPolicy(t);
    expect((await decideRaw(t, p, { requestId: rid('a'), amount: '1' })).statusCode).toBe(200);
    // An unknown policy fails inside the batch's transaction: the setting is restored either way.
    expect((await decideRaw(t, { ...p, policyId: `sgp_${'0'.repeat(32)}` }, { requestId: rid('b'), amount: '1' })).statusCode).toBe(404);
    const { rows } = await sql<{ synchronous: bigint }>`pragma synchronous`.execute(t.database.db);
    expect(Number(rows[0]!.synchronous)).toBe(2);
  });

  it('after a failed fsync answers 503 to that batch and to every later write, and is not ready', async () => {
    const t = await app();
    const p = await createPolicy(t);
    const first = await decideRaw(t, p, { requestId: rid('ok'), amount: '1' });
    expect(first.statusCode).toBe(200);

    const original = (WalSync.prototype as unknown as { syncOnce(): Promise<void> }).syncOnce;
    syncOnce().mockImplementationOnce(async function (this: WalSync) {
      (this as unknown as { sync: () => Promise<void> }).sync = async () => {
        throw new Error('EIO: i/o error, fdatasync /secret/path/db.sqlite-wal');
      };
      return original.call(this);
    });
    const failed = await decideRaw(t, p, { requestId: rid('eio'), amount: '1' });
    const body = expectProblem(failed, 503, 'storage_unavailable');
    expect(JSON.stringify(body)).not.toContain('/secret/path');
    // The caller is told when to try again, in the header and the body.
    expect(failed.headers['retry-after']).toBe('5');
    expect(body.retryAfter).toBe(5);

    // Sticky: the kernel may have dropped the pages, so nothing later is acknowledged either.
    const laterId = rid('later');
    const later = await decideRaw(t, p, { requestId: laterId, amount: '1' });
    expectProblem(later, 503, 'storage_unavailable');
    // ... and is not even stored: it could never be acknowledged.
    expect(await t.database.db.selectFrom('decisions').select('id').where('request_id', '=', laterId).execute()).toEqual([]);
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
    // The decision acknowledged before the failure still reads back.
    expect((await readDecision(t, json(first).decision.decisionId, bearer(p.agentKey))).statusCode).toBe(200);
    // No other write is acknowledged either: no new policy (with keys that would lead nowhere
    // after a crash), no replaced rules, no new agent key. The policy still reads back as it was.
    expectProblem(await t.app.inject({ method: 'POST', url: '/api/spendpolicy/policies', payload: createBody() }), 503, 'storage_unavailable');
    expectProblem(await putPolicy(t, p.policyId, { policy: rules(), agentStatus: 'inactive' }, bearer(p.adminKey)), 503, 'storage_unavailable');
    expectProblem(await rotateAgentKey(t, p.policyId, p.adminKey), 503, 'storage_unavailable');
    expect(json(await getPolicy(t, p.policyId, bearer(p.adminKey)))).toMatchObject({ revision: 1, agentStatus: 'active' });
    // The old agent key still names the policy (a rotated key would get 404); the decision itself is refused.
    expectProblem(await decideRaw(t, p, { requestId: rid('old-key'), amount: '1' }), 503, 'storage_unavailable');
  });
});

describe.skipIf(testDialect !== 'sqlite')('SQLite database file deleted or replaced while the service runs', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  // SQLite goes on writing through its open descriptors to unlinked files: every commit "synced"
  // there is gone when the process ends. Such a commit must not be acknowledged.
  it('answers 503 to the next decision instead of acknowledging it into a deleted file, and is not ready', async () => {
    t = await createTestApp();
    t.clock.set(START);
    const p = await createPolicy(t);
    expect((await decideRaw(t, p, { requestId: rid('before'), amount: '1' })).statusCode).toBe(200);
    const file = t.database.url.slice('sqlite:'.length);
    rmSync(dirname(file), { recursive: true, force: true });
    expectProblem(await decideRaw(t, p, { requestId: rid('after'), amount: '1' }), 503, 'storage_unavailable');
    expectProblem(await decideRaw(t, p, { requestId: rid('later'), amount: '1' }), 503, 'storage_unavailable');
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
  });

  it('is not ready once the file was deleted, before any write', async () => {
    t = await createTestApp();
    const file = t.database.url.slice('sqlite:'.length);
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    for (const f of [file, `${file}-wal`, `${file}-shm`]) rmSync(f, { force: true });
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
  });

  it('answers 503 once another file was put in its place (a restore over a running service)', async () => {
    t = await createTestApp();
    t.clock.set(START);
    const p = await createPolicy(t);
    const file = t.database.url.slice('sqlite:'.length);
    rmSync(file);
    writeFileSync(file, '');
    expectProblem(await decideRaw(t, p, { requestId: rid('replaced'), amount: '1' }), 503, 'storage_unavailable');
  });
});

describe.skipIf(testDialect !== 'sqlite')('SQLite database file behind a symbolic link', () => {
  const dir = mkdtempSync(join(tmpdir(), 'paywarden-symlink-'));
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('syncs the WAL beside the real file, so decisions are answered', async () => {
    // DATABASE_URL names a link (say, to a file on another volume); SQLite keeps its WAL beside
    // the link's target, and that is the file whose sync acknowledges a commit.
    mkdirSync(join(dir, 'volume'));
    const real = join(dir, 'volume', 'paywarden.sqlite');
    writeFileSync(real, '');
    const link = join(dir, 'paywarden.sqlite');
    symlinkSync(real, link);
    const database = await openDatabase(`sqlite:${link}`);
    t = await createTestApp({ database: { ...database, url: `sqlite:${link}`, drop: () => database.close() } });
    t.clock.set(START);
    const synced = syncOnce();

    const p = await createPolicy(t);
    const res = await decideRaw(t, p, { requestId: rid('linked'), amount: '1' });
    expect(res.statusCode, res.body).toBe(200);
    expect(synced).toHaveBeenCalled();
    expect(existsSync(`${real}-wal`)).toBe(true);
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });
});

describe('WalSync', () => {
  function controlled() {
    const syncs: Array<ReturnType<typeof gate>> = [];
    const fake = { prepare: () => ({ run() {} }) } as unknown as ConstructorParameters<typeof WalSync>[0];
    const w = new WalSync(fake, '/dev/null', {
      sync: () => {
        const g = gate();
        syncs.push(g);
        return g.done;
      },
    });
    return { w, syncs };
  }
  // The file is opened on the thread pool before the first sync starts.
  const started = (syncs: unknown[], n: number) => vi.waitFor(() => expect(syncs).toHaveLength(n));

  it('makes a caller that arrives during a sync wait for the next one, which all such callers share', async () => {
    const { w, syncs } = controlled();
    const a = w.barrier();
    await started(syncs, 1);
    const b = w.barrier();
    const c = w.barrier();
    syncs[0]!.release();
    await a;
    await started(syncs, 2);
    expect(await settled(b)).toBe(false);
    syncs[1]!.release();
    await Promise.all([b, c]);
    expect(syncs).toHaveLength(2);
    // Nothing in flight: the next caller starts a sync of its own.
    const d = w.barrier();
    await started(syncs, 3);
    syncs[2]!.release();
    await d;
    await w.close();
  });

  it('fails every later barrier once a sync failed, without syncing again', async () => {
    const { w, syncs } = controlled();
    const a = w.barrier();
    await started(syncs, 1);
    const b = w.barrier();
    syncs[0]!.fail(new Error('EIO'));
    await expect(a).rejects.toThrow(/fsync of the SQLite WAL failed.*EIO/);
    await expect(b).rejects.toThrow(/EIO/);
    await expect(w.barrier()).rejects.toThrow(/EIO/);
    expect(syncs).toHaveLength(1);
    expect(w.failed?.message).toMatch(/EIO/);
    await w.close();
  });

  it('a WAL that could not be opened (EMFILE in a flood of connections) fails that barrier only; the next one syncs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-wal-open-'));
    const wal = join(dir, 'x.sqlite-wal');
    const fake = { prepare: () => ({ run() {} }) } as unknown as ConstructorParameters<typeof WalSync>[0];
    let syncs = 0;
    const w = new WalSync(fake, wal, { sync: async () => void syncs++ });
    try {
      await expect(w.barrier()).rejects.toThrow(/could not be opened.*ENOENT/);
      expect(w.failed).toBeUndefined();
      writeFileSync(wal, '');
      await w.barrier();
      expect(syncs).toBe(1);
    } finally {
      await w.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
