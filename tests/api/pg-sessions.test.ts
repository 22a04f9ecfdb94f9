import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/platform/db/database.js';
import { createTestApp, json, useTwoTestApps, type TestApp } from '../helpers/app.js';
import { pgTestName, sharedDatabase, testDialect, type TestDatabase } from '../helpers/db.js';
import { bearer, createPolicy, decide, decideRaw, putPolicy, rules } from '../helpers/policies.js';
import { tcpRelay } from '../helpers/tcp-relay.js';

/** Resolves to 'timeout' if `p` has not settled within `ms`. */
function within<T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Locks held on PostgreSQL by someone who does not let go (another instance frozen in the middle
 * of a batch, an operator's open transaction) must not stall decisions without limit.
 */
describe.skipIf(testDialect !== 'postgres')('PostgreSQL session limits', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  it('an instance frozen inside a transaction loses its locks, and the others decide on', async () => {
    const p = await createPolicy(t, { dailyBudget: '50', maxPerTransaction: '10', requireHumanAbove: '10' });
    // The frozen instance: it took the policy's lock, as a decision batch does, then stopped.
    const frozen = await sharedDatabase(t.database, { pgIdleInTransactionMs: 300 });
    let wake!: () => void;
    const stopped = new Promise<void>((resolve) => (wake = resolve));
    let locked!: () => void;
    const holding = new Promise<void>((resolve) => (locked = resolve));
    const tx = frozen.db.transaction().execute(async (trx) => {
      await sql`select id from policies where id = ${p.policyId} for update`.execute(trx);
      locked();
      await stopped;
      await sql`select 1`.execute(trx);
    });
    const outcome = tx.then(
      () => 'committed',
      () => 'failed',
    );
    try {
      await holding;
      const res = await within(decideRaw(t, p, { amount: '1' }), 8_000);
      expect(res, 'the decision waited for the frozen instance').not.toBe('timeout');
      expect((res as { statusCode: number }).statusCode).toBe(200);
      expect(json(res as { body: string }).decision.decision).toBe('APPROVE');
    } finally {
      wake();
      // Woken up, the frozen instance finds its transaction ended: nothing of it is committed.
      expect(await outcome).toBe('failed');
      await frozen.close();
    }
  });

  it("keeps its session settings when the URL brings options of its own, which still apply", async () => {
    const url = new URL(t.database.url);
    url.searchParams.set('options', '-c statement_timeout=12345 -c application_name=operator');
    const db = await openDatabase(url.toString(), { pgSchema: t.database.pgSchema! });
    try {
      const show = async (name: string) => (await sql<Record<string, string>>`${sql.raw(`show ${name}`)}`.execute(db.db)).rows[0]![name];
      expect(await show('lock_timeout')).toBe('10s');
      expect(await show('idle_in_transaction_session_timeout')).toBe('5s');
      expect(await show('default_transaction_isolation')).toBe('read committed');
      expect(await show('statement_timeout')).toBe('12345ms');
      expect(await show('search_path')).toBe(t.database.pgSchema);
    } finally {
      await db.close();
    }
  });

  it('a lock held past the lock timeout answers 503 storage_unavailable, then decisions go on', async () => {
    const strict = await sharedDatabase(t.database, { pgLockTimeoutMs: 300 });
    const s = await createTestApp({ database: strict });
    const holder = new pg.Client({ connectionString: t.database.url, options: `-c search_path=${t.database.pgSchema}` });
    await holder.connect();
    try {
      const p = await createPolicy(s);
      await holder.query('begin');
      await holder.query('select id from policies where id = $1 for update', [p.policyId]);
      const res = await within(decideRaw(s, p, { amount: '1' }), 8_000);
      expect(res, 'the decision waited without limit').not.toBe('timeout');
      expect((res as { statusCode: number }).statusCode).toBe(503);
      expect(json(res as { body: string }).code).toBe('storage_unavailable');
      await holder.query('rollback');
      expect((await decide(s, p, { amount: '1' })).decision.decision).toBe('APPROVE');
    } finally {
      await holder.end();
      await s.close();
      await strict.close();
    }
  });
});

describe.skipIf(testDialect !== 'postgres')('concurrent policy replacements on two instances', () => {
  const pair = useTwoTestApps();

  it('every PUT answers with the rules it wrote and the revision it made', async () => {
    const p = await createPolicy(pair.a);
    for (let round = 0; round < 5; round++) {
      const budgets = Array.from({ length: 8 }, (_, i) => String(100 + round * 10 + i));
      const answers = await Promise.all(
        budgets.map((dailyBudget, i) => putPolicy(i % 2 ? pair.a : pair.b, p.policyId, { policy: rules({ dailyBudget }) }, bearer(p.adminKey))),
      );
      const revisions = answers.map((res, i) => {
        expect(res.statusCode, res.body).toBe(200);
        const body = json(res);
        expect(body.policy.dailyBudget).toBe(budgets[i]);
        expect(res.headers.etag).toBe(`"${body.revision}"`);
        return body.revision as number;
      });
      expect(new Set(revisions).size).toBe(budgets.length);
    }
  });
});

/**
 * A database or role configured for a stricter isolation level by default (a DBA's choice) must
 * not change how decisions are made: the service's sessions run READ COMMITTED, which its locking
 * is built on, and concurrent decisions over two instances all get their answer.
 */
describe.skipIf(testDialect !== 'postgres')('a role whose default isolation is serializable', () => {
  const tag = randomBytes(6).toString('hex');
  const role = pgTestName('pw_test_role', tag);
  const schema = pgTestName('pw_test', tag);
  let admin: pg.Client;
  let url: string;
  beforeAll(async () => {
    admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
    await admin.connect();
    await admin.query(`create role ${role} login`);
    await admin.query(`alter role ${role} set default_transaction_isolation = 'serializable'`);
    await admin.query(`create schema ${schema} authorization ${role}`);
    const u = new URL(process.env.TEST_DATABASE_URL!);
    u.username = role;
    u.password = '';
    url = u.toString();
  });
  afterAll(async () => {
    await admin.query(`drop schema if exists ${schema} cascade`);
    await admin.query(`drop role if exists ${role}`);
    await admin.end();
  });

  it('runs its transactions READ COMMITTED, and 100 concurrent decisions on two instances all answer 200', async () => {
    const open = async (): Promise<TestDatabase> => {
      const db = await openDatabase(url, { pgSchema: schema });
      return { ...db, url, pgSchema: schema, drop: () => db.close() };
    };
    const one = await open();
    const two = await open();
    const a = await createTestApp({ database: one });
    const b = await createTestApp({ database: two });
    try {
      const level = await one.db.transaction().execute((trx) => sql<{ l: string }>`select current_setting('transaction_isolation') as l`.execute(trx));
      expect(level.rows[0]!.l).toBe('read committed');

      const p = await createPolicy(a, { dailyBudget: '50', maxPerTransaction: '10', requireHumanAbove: '10', maxRepeats: 1000 });
      const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => decideRaw(i % 2 ? a : b, p, { amount: '1' })));
      const statuses = answers.map((r) => r.statusCode);
      expect(statuses.filter((s) => s !== 200), JSON.stringify(answers.find((r) => r.statusCode !== 200)?.body)).toEqual([]);
      expect(answers.filter((r) => json(r).decision.decision === 'APPROVE')).toHaveLength(50);
    } finally {
      await b.close();
      await a.close();
      await two.close();
      await one.close();
    }
  });
});

describe.skipIf(testDialect !== 'postgres')('a connection that goes silent', () => {
  it('fails its request with 503 within the query deadline; the retry decides once, and shutdown ends', async () => {
    const t = await createTestApp();
    const target = new URL(t.database.url);
    const proxy = await tcpRelay(target.hostname, Number(target.port || 5432));
    const relayed = new URL(target);
    relayed.hostname = '127.0.0.1';
    relayed.port = String(proxy.port);
    const url = relayed.toString();
    const database = await openDatabase(url, { pgSchema: t.database.pgSchema!, pgQueryDeadlineMs: 1_500 });
    const silent = await createTestApp({ database: { ...database, url, pgSchema: t.database.pgSchema!, drop: () => database.close() } });
    try {
      const p = await createPolicy(silent, { dailyBudget: '50', maxPerTransaction: '10', requireHumanAbove: '10' });
      expect((await decideRaw(silent, p, { amount: '1' })).statusCode).toBe(200);
      proxy.silence();
      const requestId = `req-${randomBytes(4).toString('hex')}`;
      const res = await within(decideRaw(silent, p, { amount: '2', requestId }), 10_000);
      expect(res, 'the decision waited on the silent connection').not.toBe('timeout');
      const problem = json(res as { body: string });
      expect((res as { statusCode: number }).statusCode, JSON.stringify(problem)).toBe(503);
      expect(problem).toMatchObject({ code: 'storage_unavailable', detail: expect.stringMatching(/same requestId/) });
      // The dead connection is gone from the pool: the retry gets a new one and decides, once.
      const retried = await within(decideRaw(silent, p, { amount: '2', requestId }), 10_000);
      expect((retried as { statusCode: number }).statusCode).toBe(200);
      expect(json(retried as { body: string }).decision.decision).toBe('APPROVE');
      const spent = await sql<{ n: string }>`select count(*) as n from decisions where policy_id = ${p.policyId} and request_id = ${requestId}`.execute(t.database.db);
      expect(Number(spent.rows[0]!.n)).toBe(1);
      // Closing waits for no dead connection.
      expect(await within(silent.close().then(() => database.close()), 10_000)).not.toBe('timeout');
    } finally {
      await within(silent.close().then(() => database.close()), 10_000).catch(() => {});
      await proxy.close();
      await t.close();
    }
  });
});
