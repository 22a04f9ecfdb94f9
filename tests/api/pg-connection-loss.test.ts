// PostgreSQL connections dropped while decisions are being made (a failover, a restart of the
// database, an administrator's pg_terminate_backend): every request gets an answer, 200 or 503,
// the process survives, nothing acknowledged is lost, and the service recovers by itself.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';

const rules = {
  maxPerTransaction: '10',
  dailyBudget: '50',
  requireHumanAbove: '10',
  maxRepeats: 1_000,
  allowedRecipients: [ADDR.alice],
  blockUnknownRecipients: true,
};

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

  const decide = (p: { policyId: string; agentKey: string }, requestId: string) =>
    t.app.inject({
      method: 'POST',
      url: '/api/spendpolicy/decisions',
      headers: { authorization: `Bearer ${p.agentKey}` },
      payload: { policyId: p.policyId, requestId, agentId: 'agent-1', chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount: '1' },
    });

  it('answers 200 or 503 (never 500, never a crash); acknowledged decisions stay; it recovers without a restart', async () => {
    const created = await t.app.inject({ method: 'POST', url: '/api/spendpolicy/policies', payload: { name: 'drops', agentId: 'agent-1', policy: rules } });
    expect(created.statusCode).toBe(201);
    const p = json<{ policyId: string; agentKey: string }>(created);

    // Only this test's connections: the pool names them after the test's schema.
    let stop = false;
    let killed = 0;
    const killing = (async () => {
      while (!stop) {
        const res = await killer.query('select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1', [`paywarden:${t.database.pgSchema}`]);
        killed += res.rowCount ?? 0;
        await new Promise((r) => setTimeout(r, 15));
      }
    })();
    const answers: Array<{ requestId: string; statusCode: number; body: string }> = [];
    for (let round = 0; round < 15; round++) {
      const ids = Array.from({ length: 20 }, (_, i) => `drop-${round}-${i}`);
      const res = await Promise.all(ids.map((id) => decide(p, id)));
      res.forEach((r, i) => answers.push({ requestId: ids[i]!, statusCode: r.statusCode, body: r.body }));
    }
    stop = true;
    await killing;
    expect(killed).toBeGreaterThan(0);

    const statuses = [...new Set(answers.map((a) => a.statusCode))].sort();
    expect(statuses.every((s) => s === 200 || s === 503), `statuses ${statuses}`).toBe(true);
    for (const a of answers.filter((x) => x.statusCode === 503)) expect(json(a).code).toBe('storage_unavailable');

    // Every acknowledged decision reads back as it was answered, and every request retried
    // gets 200: its stored decision, or a fresh one if it was never stored.
    const acknowledged = answers.filter((a) => a.statusCode === 200).map((a) => json(a).decision);
    for (const a of answers) {
      const retry = await decide(p, a.requestId);
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
