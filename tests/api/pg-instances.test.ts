// Several instances of the service on one PostgreSQL schema, as it is deployed for scale: started
// at the same moment on an empty schema (a new deployment scaled out from the start), and run as
// separate processes (`npm start` twice), whose event loops really do run at the same time.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { pgTestName, testDialect } from '../helpers/db.js';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.js';

/** A schema of this test run (tests/pg-run.ts drops it too, should the test stop before its own clean-up). */
async function withSchema(run: (url: string, schema: string, admin: pg.Client) => Promise<void>): Promise<void> {
  const url = process.env.TEST_DATABASE_URL!;
  const schema = pgTestName('pw_test', randomBytes(6).toString('hex'));
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`create schema ${schema}`);
    await run(url, schema, admin);
  } finally {
    await admin.query(`drop schema if exists ${schema} cascade`);
    await admin.end();
  }
}

describe.skipIf(testDialect !== 'postgres')('instances started at the same moment on an empty schema', () => {
  it('all of them start (one migrates, the others wait), and all sign with one published key', async () => {
    await withSchema(async (url, schema) => {
      const opened = await Promise.allSettled(Array.from({ length: 4 }, () => openDatabase(url, { pgSchema: schema, poolSize: 3 })));
      const databases = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
      const apps: TestApp[] = [];
      try {
        expect(opened.flatMap((o) => (o.status === 'rejected' ? [String(o.reason)] : []))).toEqual([]);
        const started = await Promise.allSettled(
          databases.map((db: Database) => createTestApp({ database: { ...db, url, pgSchema: schema, drop: async () => {} } })),
        );
        apps.push(...started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : [])));
        expect(started.flatMap((s) => (s.status === 'rejected' ? [String(s.reason)] : []))).toEqual([]);
        const jwks = await Promise.all(apps.map(async (t) => json(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).keys));
        // One key for every instance: a receipt one of them signs verifies with any instance's JWKS.
        expect(new Set(jwks.map((keys) => JSON.stringify(keys)))).toEqual(new Set([JSON.stringify([jwks[0]![0]])]));
      } finally {
        await Promise.all(apps.map((t) => t.close()));
        await Promise.all(databases.map((db) => db.close()));
      }
    });
  });
});

describe.skipIf(testDialect !== 'postgres')('two service processes on one schema', () => {
  const url = process.env.TEST_DATABASE_URL!;
  const schema = pgTestName('pw_test', randomBytes(6).toString('hex'));
  const bases: string[] = [];
  const services: ServiceProcess[] = [];
  let admin: pg.Client;

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`create schema ${schema}`);
    const u = new URL(url);
    u.searchParams.set('options', `-c search_path=${schema}`);
    for (let i = 0; i < 2; i++) {
      const service = await startServiceProcess({
        REDIS_URL: undefined,
        DATABASE_URL: u.toString(),
        LOG_LEVEL: 'error',
        RATE_LIMITS: 'off',
        BASE_RPC_URLS: 'http://127.0.0.1:9',
        FACILITATOR_URL: 'http://127.0.0.1:9',
      });
      services.push(service);
      bases.push(service.url);
    }
  }, 60_000);

  afterAll(async () => {
    for (const s of services) s.child.kill('SIGTERM');
    await Promise.all(services.map((s) => s.exited));
    await admin?.query(`drop schema if exists ${schema} cascade`);
    await admin?.end();
  });

  const send = async (base: string, method: string, path: string, key?: string, body?: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, etag: res.headers.get('etag'), body: (await res.json()) as any };
  };

  it('decisions, their retries, approvals and policy replacements sent to both at once: the budget and repeat limit hold, one decision per requestId, no 5xx', async () => {
    const rules = { maxPerTransaction: '10', dailyBudget: '50', requireHumanAbove: '5', maxRepeats: 4, allowedRecipients: [ADDR.alice], blockUnknownRecipients: true };
    const created = await send(bases[0]!, 'POST', '/api/spendpolicy/policies', undefined, { name: 'scaled', agentId: 'agent-1', policy: rules });
    expect(created.status).toBe(201);
    const p = created.body;
    const seen = new Map<string, Set<string>>();
    const failures: string[] = [];
    const approvals: Array<Promise<{ status: number; body: any }>> = [];
    // 120 requestIds, each sent to both processes; above 5 USDC a human approves, on both at once.
    await Promise.all(
      Array.from({ length: 240 }, async (_, i) => {
        const requestId = `r${i % 120}`;
        const amount = String(1 + ((i % 120) % 8));
        const body = { policyId: p.policyId, requestId, agentId: 'agent-1', chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount };
        const res = await send(bases[i % 2]!, 'POST', '/api/spendpolicy/decisions', p.agentKey, body);
        if (res.status !== 200) return void failures.push(`decide ${requestId}: ${res.status} ${JSON.stringify(res.body)}`);
        const d = res.body.decision;
        (seen.get(requestId) ?? seen.set(requestId, new Set()).get(requestId)!).add(d.decisionId);
        if (d.decision === 'HUMAN_APPROVAL') {
          for (const base of bases) approvals.push(send(base, 'POST', `/api/spendpolicy/decisions/${d.decisionId}/approve`, p.adminKey));
        }
        if (i % 40 === 0) {
          // An administrator replaces the rules with the same ones (If-Match), on the other process.
          const base = bases[(i + 1) % 2]!;
          const read = await send(base, 'GET', `/api/spendpolicy/policies/${p.policyId}`, p.adminKey);
          const put = await send(base, 'PUT', `/api/spendpolicy/policies/${p.policyId}`, p.adminKey, { policy: read.body.policy }, { 'if-match': read.etag! });
          if (put.status !== 200 && put.status !== 412) failures.push(`put: ${put.status} ${JSON.stringify(put.body)}`);
        }
      }),
    );
    for (const a of await Promise.all(approvals)) {
      if (a.status !== 200 && a.status !== 409) failures.push(`approve: ${a.status} ${JSON.stringify(a.body)}`);
    }
    expect(failures).toEqual([]);
    for (const [requestId, ids] of seen) expect(ids.size, requestId).toBe(1);

    const { rows } = await admin.query(`select decision, approval_status, amount_micro::text as amount from ${schema}.decisions where policy_id = $1`, [p.policyId]);
    expect(rows).toHaveLength(120);
    const spending = rows.filter((r) => r.decision === 'APPROVE' || r.approval_status === 'ADMIN_APPROVED');
    const spent = spending.reduce((sum, r) => sum + BigInt(r.amount), 0n);
    expect(spent).toBeLessThanOrEqual(50_000_000n);
    const perAmount = new Map<string, number>();
    for (const r of spending) perAmount.set(r.amount, (perAmount.get(r.amount) ?? 0) + 1);
    for (const [amount, n] of perAmount) expect(n, `repeats of ${amount}`).toBeLessThanOrEqual(4);
    const stored = await admin.query(`select spent_micro::text as spent from ${schema}.policy_day_spend where policy_id = $1`, [p.policyId]);
    expect(BigInt(stored.rows[0]?.spent ?? 0)).toBe(spent);
  });
});
