import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADDR, createTestApp, json, useTwoTestApps, type TestApp } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';

const rules = {
  maxPerTransaction: '10',
  dailyBudget: '50',
  requireHumanAbove: '10',
  maxRepeats: 1_000,
  allowedRecipients: [ADDR.alice],
  blockUnknownRecipients: true,
};

async function createPolicy(t: TestApp, policy: Record<string, unknown> = rules) {
  const res = await t.app.inject({ method: 'POST', url: '/api/spendpolicy/policies', payload: { name: 'load', agentId: 'agent-1', policy } });
  expect(res.statusCode).toBe(201);
  return json<{ policyId: string; adminKey: string; agentKey: string }>(res);
}

function decide(t: TestApp, p: { policyId: string; agentKey: string }, requestId: string, amount = '1') {
  return t.app.inject({
    method: 'POST',
    url: '/api/spendpolicy/decisions',
    headers: { authorization: `Bearer ${p.agentKey}` },
    payload: { policyId: p.policyId, requestId, agentId: 'agent-1', chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount },
  });
}

function tally(responses: Array<{ statusCode: number; body: string }>) {
  const out = { APPROVE: 0, BLOCK: 0, HUMAN_APPROVAL: 0, other: 0, budgetReasons: 0 };
  for (const r of responses) {
    if (r.statusCode !== 200) {
      out.other++;
      continue;
    }
    const d = json(r).decision;
    out[d.decision as 'APPROVE']++;
    if (d.reasons.includes('exceeds_daily_budget')) out.budgetReasons++;
  }
  return out;
}

describe('no overspend under concurrency', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  it('200 concurrent 1 USDC decisions against a 50 USDC budget approve exactly 50', async () => {
    const p = await createPolicy(t);
    const responses = await Promise.all(Array.from({ length: 200 }, (_, i) => decide(t, p, `req-${i}`)));
    const counts = tally(responses);
    expect(counts).toEqual({ APPROVE: 50, BLOCK: 150, HUMAN_APPROVAL: 0, other: 0, budgetReasons: 150 });
  });

  it('concurrent retries of one requestId spend once and answer the same decision', async () => {
    const p = await createPolicy(t);
    const responses = await Promise.all(Array.from({ length: 20 }, () => decide(t, p, 'same', '7')));
    const ids = new Set(responses.map((r) => json(r).decision.decisionId));
    expect(responses.every((r) => r.statusCode === 200)).toBe(true);
    expect(ids.size).toBe(1);
    // Retries inside the batch that made the decision get the receipt it was signing: every
    // answer carries the one stored receipt.
    const receipts = new Set(responses.map((r) => JSON.stringify(json(r).receipt)));
    expect(receipts.size).toBe(1);
    const stored = await t.app.inject({
      method: 'GET',
      url: `/api/spendpolicy/decisions/${[...ids][0]}`,
      headers: { authorization: `Bearer ${p.agentKey}` },
    });
    expect(JSON.stringify(json(stored).receipt)).toBe([...receipts][0]);
    // 43 left: a 10 fits four times, the fifth does not.
    const after = await Promise.all([1, 2, 3, 4, 5].map((i) => decide(t, p, `after-${i}`, '10')));
    expect(tally(after)).toMatchObject({ APPROVE: 4, BLOCK: 1 });
  });

  it('concurrent approvals of pending decisions cannot overspend', async () => {
    // Everything above 1 USDC needs a human; 30 pending requests of 5 USDC against a budget of 50.
    const p = await createPolicy(t, { ...rules, requireHumanAbove: '1' });
    const pending = await Promise.all(Array.from({ length: 30 }, (_, i) => decide(t, p, `pending-${i}`, '5')));
    expect(tally(pending).HUMAN_APPROVAL).toBe(30);
    const approvals = await Promise.all(
      pending.map((r) =>
        t.app.inject({
          method: 'POST',
          url: `/api/spendpolicy/decisions/${json(r).decision.decisionId}/approve`,
          headers: { authorization: `Bearer ${p.adminKey}` },
        }),
      ),
    );
    const statuses = approvals.map((r) => r.statusCode).sort();
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 409)).toHaveLength(20);
  });
});

describe.skipIf(testDialect !== 'postgres')('two service instances sharing one PostgreSQL database', () => {
  const pair = useTwoTestApps();

  it('split 200 concurrent decisions across both and still approve exactly 50', async () => {
    const p = await createPolicy(pair.a);
    const responses = await Promise.all(Array.from({ length: 200 }, (_, i) => decide(i % 2 ? pair.a : pair.b, p, `req-${i}`)));
    expect(tally(responses)).toEqual({ APPROVE: 50, BLOCK: 150, HUMAN_APPROVAL: 0, other: 0, budgetReasons: 150 });
  });
});

/**
 * PostgreSQL connections dropped while decisions are being made (a failover, a restart of the
 * database, an administrator's pg_terminate_backend): every request gets an answer, 200 or 503,
 * the process survives, nothing acknowledged is lost, and the service recovers by itself.
 */
describe.skipIf(testDialect !== 'postgres')('PostgreSQL connections dropped under load', () => {
  let t: TestApp;
  let killer: pg.Client;
  beforeAll(async () => {
    t = await createTestApp();
    killer = new pg.Client({ connectionString: t.database.url });
    await killer.connect();
  });
  afterAll(async () => {
    await killer?.end();
    await t?.close();
  });

  it('answers 200 or 503 (never 500, never a crash); acknowledged decisions stay; it recovers without a restart', async () => {
    const p = await createPolicy(t);

    // Only this test's connections: the pool names them after the test's schema.
    let stop = false;
    const killed: number[] = [];
    const killing = (async () => {
      while (!stop) {
        const res = await killer.query('select pid, pg_terminate_backend(pid) from pg_stat_activity where application_name = $1', [`paywarden:${t.database.pgSchema}`]);
        killed.push(...res.rows.map((r: { pid: number }) => r.pid));
        await new Promise((r) => setTimeout(r, 15));
      }
    })();
    const answers: Array<{ requestId: string; statusCode: number; body: string }> = [];
    for (let round = 0; round < 15; round++) {
      const ids = Array.from({ length: 20 }, (_, i) => `drop-${round}-${i}`);
      const res = await Promise.all(ids.map((id) => decide(t, p, id)));
      res.forEach((r, i) => answers.push({ requestId: ids[i]!, statusCode: r.statusCode, body: r.body }));
    }
    stop = true;
    await killing;
    expect(killed.length).toBeGreaterThan(0);
    // pg_terminate_backend only signals: until a killed backend has ended, the pool may still
    // hand out its connection, and a request on it gets one more 503. Once they are gone:
    for (let waited = 0; waited < 100; waited++) {
      const left = await killer.query('select count(*)::int as n from pg_stat_activity where pid = any($1)', [killed]);
      if (left.rows[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }

    const statuses = [...new Set(answers.map((a) => a.statusCode))].sort();
    expect(statuses.every((s) => s === 200 || s === 503), `statuses ${statuses}`).toBe(true);
    for (const a of answers.filter((x) => x.statusCode === 503)) expect(json(a).code).toBe('storage_unavailable');

    // Every acknowledged decision reads back as it was answered, and every request retried
    // gets 200: its stored decision, or a fresh one if it was never stored.
    const acknowledged = answers.filter((a) => a.statusCode === 200).map((a) => json(a).decision);
    for (const a of answers) {
      const retry = await decide(t, p, a.requestId);
      expect(retry.statusCode).toBe(200);
      if (a.statusCode === 200) expect(json(retry).decision).toEqual(json(a).decision);
    }
    const stored = await t.database.db.selectFrom('decisions').select(['id', 'decision']).where('policy_id', '=', p.policyId).execute();
    expect(stored).toHaveLength(answers.length);
    for (const d of acknowledged) expect(stored.map((s) => s.id)).toContain(d.decisionId);
    // The budget held: exactly 50 of 300 one-USDC requests approved, whatever was dropped.
    expect(stored.filter((s) => s.decision === 'APPROVE')).toHaveLength(50);
  });
});
