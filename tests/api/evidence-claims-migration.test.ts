import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../src/platform/db/migrations.js';
import { createTestApp, json, ADDR } from '../helpers/app.js';
import { suiteFixture } from '../helpers/suite.js';

// Migration 0005 claims, for chains reconciled as MATCH before it, the transfers they matched.
describe('migration 0005 (settlement claims) on existing evidence', () => {
  const t = suiteFixture(() => createTestApp());

  it('claims the paying transfer of every earlier MATCH, the oldest chain first', async () => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/spendpolicy/policies',
      payload: { name: 'm', agentId: 'a', policy: { maxPerTransaction: '10', dailyBudget: '100', requireHumanAbove: '10', maxRepeats: 5, allowedRecipients: [ADDR.bob], blockUnknownRecipients: true } },
    });
    const policyId = json(res).policyId as string;
    const db = t.database.db;
    const tx = `0x${'ab'.repeat(32)}`;
    const observation = (result: string) => ({
      txHash: tx,
      result,
      reason: '',
      mismatches: [],
      confirmations: 1,
      requiredConfirmations: 1,
      blockNumber: 1,
      transfers: [
        { from: ADDR.alice, to: ADDR.carol, amount: '1.5', logIndex: 0 },
        { from: ADDR.alice, to: ADDR.bob, amount: '1.5', logIndex: 3 },
      ],
      expected: { recipient: ADDR.bob.toLowerCase(), amount: '1.5' },
      checkedAt: '2026-01-15T12:00:00.000Z',
    });
    const chains = [
      { id: 'ec_first', at: '2026-01-15T12:00:01.000Z', result: 'MATCH' },
      { id: 'ec_second', at: '2026-01-15T12:00:02.000Z', result: 'MATCH' },
      { id: 'ec_pending', at: '2026-01-15T12:00:03.000Z', result: 'PENDING' },
    ];
    for (const c of chains) {
      await db.insertInto('evidence_chains').values({ id: c.id, policy_id: policyId, request_id: c.id, decision_id: 'dec_x', intent: '{}', intent_digest: 'x', created_at: c.at }).execute();
      await db
        .insertInto('evidence_events')
        .values({ id: `ev_${c.id}`, chain_id: c.id, sequence: 1, event_type: 'SETTLEMENT_RECONCILED', body: JSON.stringify(observation(c.result)), created_at: c.at, prev_hash: 'x', hash: 'y' })
        .execute();
    }
    // As if this database had been made before migration 0005 (and so before every later one,
    // which run again after it: 0006 and 0007 only rebuild indexes, 0008 replaces its functions,
    // 0009 adds a column only where it is missing).
    await db.schema.dropTable('evidence_settlement_claims').execute();
    await sql`delete from ${sql.table(t.database.pgSchema ? `${t.database.pgSchema}.kysely_migration` : 'kysely_migration')} where name >= '0005'`.execute(db);
    await migrateToLatest(db, t.database.dialect, t.database.pgSchema);

    const claims = await db.selectFrom('evidence_settlement_claims').select(['tx_hash', 'log_index', 'chain_id']).execute();
    // The transfer to the intent's recipient, held by the oldest MATCH; the second has no other to hold.
    expect(claims.map((c) => ({ ...c, log_index: Number(c.log_index) }))).toEqual([{ tx_hash: tx, log_index: 3, chain_id: 'ec_first' }]);
  });
});
