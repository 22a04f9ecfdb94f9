import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestApp, createTwoTestApps, json, type TestApp } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';
import { createPolicy, decideRaw, type Created } from '../helpers/policies.js';
import { createChainRaw, intentBody } from './evidence-helpers.js';

async function spentOf(t: TestApp, policyId: string): Promise<bigint> {
  const row = await t.database.db.selectFrom('policy_day_spend').select('spent_micro').where('policy_id', '=', policyId).executeTakeFirst();
  return row ? BigInt(row.spent_micro) : 0n;
}

async function countRows(t: TestApp, policyId: string) {
  const chains = await t.database.db.selectFrom('evidence_chains').select('id').where('policy_id', '=', policyId).execute();
  const decisions = await t.database.db.selectFrom('decisions').select('id').where('policy_id', '=', policyId).execute();
  const events = chains.length
    ? await t.database.db.selectFrom('evidence_events').select('id').where('chain_id', 'in', chains.map((c) => c.id)).execute()
    : [];
  return { chains: chains.length, decisions: decisions.length, events: events.length };
}

function expectOneCreation(responses: Array<{ statusCode: number; body: string }>) {
  const statuses = responses.map((r) => r.statusCode);
  expect(statuses.filter((s) => s === 201)).toHaveLength(1);
  expect(statuses.filter((s) => s === 200)).toHaveLength(responses.length - 1);
  const bodies = responses.map((r) => json(r));
  expect(new Set(bodies.map((b) => b.evidenceChainId)).size).toBe(1);
  expect(new Set(bodies.map((b) => b.decisionId)).size).toBe(1);
  expect(bodies.filter((b) => b.replayed === false)).toHaveLength(1);
  expect(bodies.every((b) => b.decision === 'APPROVE')).toBe(true);
}

describe('evidence chains under concurrency', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  it('20 concurrent identical creations: one 201, nineteen 200 replayed, the budget spent once', async () => {
    const p = await createPolicy(t, { dailyBudget: '100', requireHumanAbove: '50', maxPerTransaction: '50' });
    const body = intentBody(p.policyId, { requestId: 'same-intent', amount: '7' });
    const responses = await Promise.all(Array.from({ length: 20 }, () => createChainRaw(t, p.agentKey, body)));
    expectOneCreation(responses);
    expect(await spentOf(t, p.policyId)).toBe(7_000_000n);
    expect(await countRows(t, p.policyId)).toEqual({ chains: 1, decisions: 1, events: 1 });
  });

  it('chains and plain decisions racing for one budget never overspend it', async () => {
    const p = await createPolicy(t, { dailyBudget: '50', requireHumanAbove: '50', maxPerTransaction: '50' });
    const responses = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 ? createChainRaw(t, p.agentKey, intentBody(p.policyId, { amount: '5' })) : decideRaw(t, p, { amount: '5' }),
      ),
    );
    const decisions = responses.map((r, i) => {
      expect(r.statusCode, r.body).toBe(i % 2 ? 201 : 200);
      return i % 2 ? json(r).decision : json(r).decision.decision;
    });
    expect(decisions.filter((d) => d === 'APPROVE')).toHaveLength(10);
    expect(decisions.filter((d) => d === 'BLOCK')).toHaveLength(30);
    expect(await spentOf(t, p.policyId)).toBe(50_000_000n);
  });

  it('an intent and a plain decision racing for one requestId: one spend, the loser refused or answered the same decision', async () => {
    const p = await createPolicy(t, { dailyBudget: '100', requireHumanAbove: '50', maxPerTransaction: '50' });
    const responses = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        i % 2
          ? createChainRaw(t, p.agentKey, intentBody(p.policyId, { requestId: 'contested', amount: '9' }))
          : decideRaw(t, p, { requestId: 'contested', amount: '9' }),
      ),
    );
    for (const r of responses) expect([200, 201, 409]).toContain(r.statusCode);
    expect(await spentOf(t, p.policyId)).toBe(9_000_000n);
    const rows = await countRows(t, p.policyId);
    expect(rows.decisions).toBe(1);
    expect(rows.chains).toBeLessThanOrEqual(1);
  });
});

describe.skipIf(testDialect !== 'postgres')('two service instances sharing one PostgreSQL database', () => {
  let a: TestApp;
  let b: TestApp;
  let pair: Awaited<ReturnType<typeof createTwoTestApps>>;
  let p: Created;
  beforeAll(async () => {
    pair = await createTwoTestApps();
    ({ a, b } = pair);
    p = await createPolicy(a, { dailyBudget: '100', requireHumanAbove: '50', maxPerTransaction: '50' });
  });
  afterAll(async () => {
    await pair?.close();
  });

  it('20 identical creations split across both instances still create one chain and spend once', async () => {
    const body = intentBody(p.policyId, { requestId: 'two-instances', amount: '3' });
    const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => createChainRaw(i % 2 ? a : b, p.agentKey, body)));
    expectOneCreation(responses);
    expect(await spentOf(a, p.policyId)).toBe(3_000_000n);
  });
});
