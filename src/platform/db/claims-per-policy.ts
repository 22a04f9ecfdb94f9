import { sql, type Kysely } from 'kysely';
import type { Dialect } from './database.js';
import { payingTransfers, type SettlementObservation } from '../../features/evidence/settlement.js';

/**
 * Migration 0010: settlement claims are held per policy, keyed (policy_id, tx_hash, log_index).
 *
 * 0005 keyed them by the transfer alone, across tenants: anyone could open a chain under a policy
 * of their own whose intent copies a public Base transfer, reconcile it first, and so lock the
 * rightful tenant out of recording its own payment's settlement. Within one policy a transfer
 * still settles one intent; another policy's claim is that tenant's own record and blocks nobody.
 * Existing claims take the policy of their chain; then each MATCH that holds no claim claims its
 * transfer in its own policy (see claimUnclaimedMatches).
 */
export async function claimsPerPolicy(db: Kysely<any>, dialect: Dialect): Promise<void> {
  if (dialect === 'postgres') {
    // PostgreSQL runs each migration in one transaction with its record: all of it or nothing.
    await db.schema.alterTable('evidence_settlement_claims').addColumn('policy_id', 'text', (c) => c.references('policies.id')).execute();
    await sql`update evidence_settlement_claims c set policy_id = ch.policy_id from evidence_chains ch where ch.id = c.chain_id`.execute(db);
    await db.schema.alterTable('evidence_settlement_claims').alterColumn('policy_id', (c) => c.setNotNull()).execute();
    await db.schema.alterTable('evidence_settlement_claims').dropConstraint('evidence_settlement_claims_pk').execute();
    await db.schema.alterTable('evidence_settlement_claims').addPrimaryKeyConstraint('evidence_settlement_claims_pk', ['policy_id', 'tx_hash', 'log_index']).execute();
    await claimUnclaimedMatches(db);
    return;
  }
  // SQLite cannot change a primary key, so the table is rebuilt, inside the migrations'
  // transaction (see TransactionalDdlSqliteDialect). A database that an earlier version, which
  // ran the rebuild as a transaction of its own, left rebuilt but unrecorded is found done.
  const done = await sql`select 1 from pragma_table_info('evidence_settlement_claims') where name = 'policy_id'`.execute(db);
  if (done.rows.length > 0) return;
  await db.schema
    .createTable('evidence_settlement_claims_0010')
    .addColumn('policy_id', 'text', (c) => c.notNull().references('policies.id'))
    .addColumn('tx_hash', 'text', (c) => c.notNull())
    .addColumn('log_index', 'integer', (c) => c.notNull())
    .addColumn('chain_id', 'text', (c) => c.notNull().references('evidence_chains.id'))
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('evidence_settlement_claims_pk', ['policy_id', 'tx_hash', 'log_index'])
    .execute();
  await sql`insert into evidence_settlement_claims_0010 (policy_id, tx_hash, log_index, chain_id, created_at)
    select ch.policy_id, c.tx_hash, c.log_index, c.chain_id, c.created_at
    from evidence_settlement_claims c join evidence_chains ch on ch.id = c.chain_id`.execute(db);
  await db.schema.dropTable('evidence_settlement_claims').execute();
  await db.schema.alterTable('evidence_settlement_claims_0010').renameTo('evidence_settlement_claims').execute();
  // Dropped with the old table; purging a policy's chains finds their claims through it.
  await db.schema.createIndex('evidence_settlement_claims_chain').on('evidence_settlement_claims').column('chain_id').execute();
  await claimUnclaimedMatches(db);
}

/**
 * 0005 gave each transfer one claim across all policies, to the oldest MATCH naming it: a chain
 * of another policy reconciled as MATCH of the same transfer before 0005 was left without one.
 * Unclaimed, its payment could settle a second intent of its own policy. Each such MATCH now
 * claims the first of its paying transfers that its policy does not hold yet, oldest first as
 * in 0005, so that within a policy the oldest MATCH keeps the payment.
 */
async function claimUnclaimedMatches(db: Kysely<any>): Promise<void> {
  const matches = await db
    .selectFrom('evidence_events as e')
    .innerJoin('evidence_chains as ch', 'ch.id', 'e.chain_id')
    .select(['e.chain_id', 'ch.policy_id', 'e.body', 'e.created_at'])
    .where('e.event_type', '=', 'SETTLEMENT_RECONCILED')
    .where(({ exists, not, selectFrom }) => not(exists(selectFrom('evidence_settlement_claims as c').select('c.chain_id').whereRef('c.chain_id', '=', 'e.chain_id'))))
    .orderBy('e.created_at')
    .orderBy('e.id')
    .execute();
  for (const m of matches as Array<{ chain_id: string; policy_id: string; body: string; created_at: string }>) {
    const o = JSON.parse(m.body) as SettlementObservation;
    if (o.result !== 'MATCH') continue;
    for (const t of payingTransfers(o)) {
      const claim = { policy_id: m.policy_id, tx_hash: o.txHash.toLowerCase(), log_index: t.logIndex, chain_id: m.chain_id, created_at: m.created_at };
      const res = await db
        .insertInto('evidence_settlement_claims')
        .values(claim)
        .onConflict((oc) => oc.columns(['policy_id', 'tx_hash', 'log_index']).doNothing())
        .executeTakeFirst();
      if (Number(res.numInsertedOrUpdatedRows ?? 0) > 0) break;
    }
  }
}
