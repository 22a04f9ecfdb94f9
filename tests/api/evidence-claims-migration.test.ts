import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrateToLatest } from '../../src/platform/db/migrations.js';
import { createTestApp, json, ADDR, type TestApp } from '../helpers/app.js';
import { createPolicy } from '../helpers/policies.js';
import { suiteFixture } from '../helpers/suite.js';

/** Makes the database forget that migration `from` and every later one ran, so they run again. */
async function forgetMigrationsFrom(t: TestApp, from: string): Promise<void> {
  const table = sql.table(t.database.pgSchema ? `${t.database.pgSchema}.kysely_migration` : 'kysely_migration');
  await sql`delete from ${table} where name >= ${from}`.execute(t.database.db);
}

const TX = `0x${'ab'.repeat(32)}`;

/** Chains, each with one SETTLEMENT_RECONCILED event on TX, whose transfer at log 3 pays bob 1.5. */
async function seedReconciled(t: TestApp, chains: Array<{ id: string; policyId: string; at: string; result: string }>): Promise<void> {
  const observation = (result: string) => ({
    txHash: TX,
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
  const db = t.database.db;
  for (const c of chains) {
    await db.insertInto('evidence_chains').values({ id: c.id, policy_id: c.policyId, request_id: c.id, decision_id: 'dec_x', intent: '{}', intent_digest: 'x', created_at: c.at }).execute();
    await db
      .insertInto('evidence_events')
      .values({ id: `ev_${c.id}`, chain_id: c.id, sequence: 1, event_type: 'SETTLEMENT_RECONCILED', body: JSON.stringify(observation(c.result)), created_at: c.at, prev_hash: 'x', hash: 'y' })
      .execute();
  }
}

/**
 * As if this database had been made before migration 0005 (and so before every later one, which
 * run again after it: 0006 and 0007 only rebuild indexes, 0008 replaces its functions, 0009 adds
 * a column only where it is missing, 0010 rekeys the claims 0005 made).
 */
async function migrateFromBefore0005(t: TestApp): Promise<void> {
  await t.database.db.schema.dropTable('evidence_settlement_claims').execute();
  await forgetMigrationsFrom(t, '0005');
  await migrateToLatest(t.database.db, t.database.dialect, t.database.pgSchema);
}

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
    await seedReconciled(t, [
      { id: 'ec_first', policyId, at: '2026-01-15T12:00:01.000Z', result: 'MATCH' },
      { id: 'ec_second', policyId, at: '2026-01-15T12:00:02.000Z', result: 'MATCH' },
      { id: 'ec_pending', policyId, at: '2026-01-15T12:00:03.000Z', result: 'PENDING' },
    ]);
    await migrateFromBefore0005(t);

    const claims = await db.selectFrom('evidence_settlement_claims').select(['tx_hash', 'log_index', 'chain_id']).execute();
    // The transfer to the intent's recipient, held by the oldest MATCH; the second has no other to hold.
    expect(claims.map((c) => ({ ...c, log_index: Number(c.log_index) }))).toEqual([{ tx_hash: TX, log_index: 3, chain_id: 'ec_first' }]);
  });
});

// Migration 0010 keys the claims by policy: (policy_id, tx_hash, log_index) instead of the transfer alone.
describe('migration 0010 (settlement claims per policy) on existing claims', () => {
  const t = suiteFixture(() => createTestApp());
  const txA = `0x${'a1'.repeat(32)}`;
  const txB = `0x${'b2'.repeat(32)}`;
  const claimsOf = async () =>
    (await t.database.db.selectFrom('evidence_settlement_claims').selectAll().orderBy('chain_id').orderBy('log_index').execute()).map((c) => ({
      ...c,
      log_index: Number(c.log_index),
    }));

  it('gives every claim the policy of its chain; the same transfer may then be held once per policy', async () => {
    const db = t.database.db;
    const [a, b] = [await createPolicy(t), await createPolicy(t)];
    const chains = [
      { id: 'ec_a1', policy_id: a.policyId },
      { id: 'ec_a2', policy_id: a.policyId },
      { id: 'ec_b1', policy_id: b.policyId },
    ];
    for (const c of chains) {
      await db.insertInto('evidence_chains').values({ ...c, request_id: c.id, decision_id: 'dec_x', intent: '{}', intent_digest: 'x', created_at: '2026-01-15T12:00:00.000Z' }).execute();
    }
    // The claims table as 0005 made it (one claim per transfer, whatever the policy), holding claims.
    await db.schema.dropTable('evidence_settlement_claims').execute();
    await sql`create table evidence_settlement_claims (tx_hash text not null, log_index integer not null,
      chain_id text not null references evidence_chains (id), created_at text not null,
      constraint evidence_settlement_claims_pk primary key (tx_hash, log_index))`.execute(db);
    await sql`create index evidence_settlement_claims_chain on evidence_settlement_claims (chain_id)`.execute(db);
    const at = '2026-01-15T12:00:01.000Z';
    await sql`insert into evidence_settlement_claims (tx_hash, log_index, chain_id, created_at)
      values (${txA}, 3, 'ec_a1', ${at}), (${txA}, 5, 'ec_a2', ${at}), (${txB}, 0, 'ec_b1', ${at})`.execute(db);
    await forgetMigrationsFrom(t, '0010');
    await migrateToLatest(db, t.database.dialect, t.database.pgSchema);

    const migrated = [
      { policy_id: a.policyId, tx_hash: txA, log_index: 3, chain_id: 'ec_a1', created_at: at },
      { policy_id: a.policyId, tx_hash: txA, log_index: 5, chain_id: 'ec_a2', created_at: at },
      { policy_id: b.policyId, tx_hash: txB, log_index: 0, chain_id: 'ec_b1', created_at: at },
    ];
    expect(await claimsOf()).toEqual(migrated);
    // Another policy may now hold a transfer policy A holds; policy A cannot hold it twice.
    const claim = (policy_id: string, chain_id: string) => db.insertInto('evidence_settlement_claims').values({ policy_id, tx_hash: txA, log_index: 3, chain_id, created_at: at }).execute();
    await claim(b.policyId, 'ec_b1');
    await expect(claim(a.policyId, 'ec_a2')).rejects.toThrow();
    // SQLite rebuilt the table: its index on chain_id (purges find a chain's claims through it) is back.
    const indexes =
      t.database.dialect === 'postgres'
        ? await sql<{ name: string }>`select indexname as name from pg_indexes where schemaname = current_schema() and tablename = 'evidence_settlement_claims'`.execute(db)
        : await sql<{ name: string }>`select name from pragma_index_list('evidence_settlement_claims')`.execute(db);
    expect(indexes.rows.map((r) => r.name)).toContain('evidence_settlement_claims_chain');

    // SQLite records a migration after it ran, outside its transaction: a start that stopped in
    // between runs 0010 again, which must find its work done.
    if (t.database.dialect === 'sqlite') {
      const before = await claimsOf();
      await forgetMigrationsFrom(t, '0010');
      await migrateToLatest(db, t.database.dialect, t.database.pgSchema);
      expect(await claimsOf()).toEqual(before);
    }
  });

  it("claims, in its own policy, a MATCH that 0005 left unclaimed because another policy's chain held the transfer", async () => {
    const [a, b] = [await createPolicy(t), await createPolicy(t)];
    await seedReconciled(t, [
      { id: 'ec_pa', policyId: a.policyId, at: '2026-01-15T12:00:01.000Z', result: 'MATCH' },
      { id: 'ec_pb', policyId: b.policyId, at: '2026-01-15T12:00:02.000Z', result: 'MATCH' },
      { id: 'ec_pb_later', policyId: b.policyId, at: '2026-01-15T12:00:03.000Z', result: 'MATCH' },
    ]);
    await migrateFromBefore0005(t);
    // 0005 gave the transfer to ec_pa alone; in policy B the oldest MATCH now holds it too.
    expect((await claimsOf()).map(({ policy_id, tx_hash, log_index, chain_id }) => ({ policy_id, tx_hash, log_index, chain_id }))).toEqual([
      { policy_id: a.policyId, tx_hash: TX, log_index: 3, chain_id: 'ec_pa' },
      { policy_id: b.policyId, tx_hash: TX, log_index: 3, chain_id: 'ec_pb' },
    ]);
  });
});
