import { Migrator, sql, type Kysely, type Migration } from 'kysely';
import type { Dialect } from './database.js';
import { payingTransfers, type SettlementObservation } from '../../features/evidence/settlement.js';

/**
 * Migrations run at start, in order, once each. They are written once for both databases:
 * types are chosen so that SQLite and PostgreSQL read them the same way.
 */
function migrations(dialect: Dialect): Record<string, Migration> {
  const autoId = dialect === 'sqlite' ? 'integer primary key autoincrement' : 'bigserial primary key';
  return {
    '0001_foundation': {
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('kv')
          .addColumn('key', 'text', (c) => c.primaryKey())
          .addColumn('value', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema
          .createTable('pilot_leads')
          .addColumn('seq', sql.raw(autoId))
          .addColumn('id', 'text', (c) => c.notNull().unique())
          .addColumn('email', 'text', (c) => c.notNull())
          .addColumn('company', 'text', (c) => c.notNull())
          .addColumn('monthly_decisions', 'text', (c) => c.notNull())
          .addColumn('needs', 'text', (c) => c.notNull())
          .addColumn('source', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('pilot_leads_created_at').on('pilot_leads').column('created_at').execute();
      },
    },
    '0002_protected_policies': {
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('policies')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('agent_id', 'text', (c) => c.notNull())
          .addColumn('rules', 'text', (c) => c.notNull())
          .addColumn('revision', 'integer', (c) => c.notNull())
          .addColumn('status', 'text', (c) => c.notNull())
          .addColumn('agent_status', 'text', (c) => c.notNull())
          .addColumn('direct_checks', 'integer', (c) => c.notNull().defaultTo(0))
          .addColumn('admin_key_hash', 'text', (c) => c.notNull())
          .addColumn('agent_key_hash', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('updated_at', 'text', (c) => c.notNull())
          .addColumn('access_expires_at', 'text', (c) => c.notNull())
          .addColumn('purged_at', 'text')
          .execute();
        await db.schema.createIndex('policies_access_expires_at').on('policies').column('access_expires_at').execute();
        await db.schema
          .createTable('decisions')
          .addColumn('seq', sql.raw(autoId))
          .addColumn('id', 'text', (c) => c.notNull().unique())
          .addColumn('policy_id', 'text', (c) => c.notNull().references('policies.id'))
          .addColumn('request_id', 'text', (c) => c.notNull())
          .addColumn('agent_id', 'text', (c) => c.notNull())
          .addColumn('recipient', 'text', (c) => c.notNull())
          .addColumn('amount_micro', 'bigint', (c) => c.notNull())
          .addColumn('request_digest', 'text', (c) => c.notNull())
          .addColumn('decision', 'text', (c) => c.notNull())
          .addColumn('reasons', 'text', (c) => c.notNull())
          .addColumn('policy_revision', 'integer', (c) => c.notNull())
          .addColumn('day', 'text', (c) => c.notNull())
          .addColumn('approval_status', 'text')
          .addColumn('approval_expires_at', 'text')
          .addColumn('approved_at', 'text')
          .addColumn('approval_note', 'text')
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('receipt', 'text', (c) => c.notNull())
          .execute();
        // The idempotency key: one decision per requestId per policy, enforced by the database.
        await db.schema.createIndex('decisions_policy_request').unique().on('decisions').columns(['policy_id', 'request_id']).execute();
        await db.schema.createIndex('decisions_policy_seq').on('decisions').columns(['policy_id', 'seq']).execute();
        await db.schema.createIndex('decisions_policy_approval').on('decisions').columns(['policy_id', 'approval_status', 'seq']).execute();
        // Running totals per policy and UTC day, so budgets and repeat counts never scan history.
        await db.schema
          .createTable('policy_day_spend')
          .addColumn('policy_id', 'text', (c) => c.notNull())
          .addColumn('day', 'text', (c) => c.notNull())
          .addColumn('spent_micro', 'bigint', (c) => c.notNull())
          .addPrimaryKeyConstraint('policy_day_spend_pk', ['policy_id', 'day'])
          .execute();
        await db.schema
          .createTable('policy_day_repeats')
          .addColumn('policy_id', 'text', (c) => c.notNull())
          .addColumn('day', 'text', (c) => c.notNull())
          .addColumn('recipient', 'text', (c) => c.notNull())
          .addColumn('amount_micro', 'bigint', (c) => c.notNull())
          .addColumn('count', 'integer', (c) => c.notNull())
          .addPrimaryKeyConstraint('policy_day_repeats_pk', ['policy_id', 'day', 'recipient', 'amount_micro'])
          .execute();
        // Looking a key up by its hash (expired-policy answers) must not scan the table.
        await db.schema.createIndex('policies_admin_key_hash').on('policies').column('admin_key_hash').execute();
        await db.schema.createIndex('policies_agent_key_hash').on('policies').column('agent_key_hash').execute();
      },
    },
    '0003_paid_reports': {
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('paid_reports')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('path', 'text', (c) => c.notNull())
          .addColumn('input_digest', 'text', (c) => c.notNull())
          .addColumn('input', 'text', (c) => c.notNull())
          .addColumn('report', 'text', (c) => c.notNull())
          .addColumn('receipt', 'text')
          .addColumn('price_micro', 'bigint', (c) => c.notNull())
          .addColumn('network', 'text', (c) => c.notNull())
          .addColumn('pay_to', 'text', (c) => c.notNull())
          .addColumn('payer', 'text', (c) => c.notNull())
          .addColumn('auth_id', 'text', (c) => c.notNull().unique())
          .addColumn('payment_digest', 'text', (c) => c.notNull())
          .addColumn('payment', 'text', (c) => c.notNull())
          .addColumn('status', 'text', (c) => c.notNull())
          .addColumn('settle_tx', 'text')
          .addColumn('failure', 'text')
          .addColumn('from_block', 'bigint', (c) => c.notNull())
          .addColumn('order_id', 'text')
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('settled_at', 'text')
          .execute();
        await db.schema
          .createTable('orders')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('key_hash', 'text', (c) => c.notNull())
          .addColumn('path', 'text', (c) => c.notNull())
          .addColumn('input_digest', 'text', (c) => c.notNull())
          .addColumn('input', 'text', (c) => c.notNull())
          .addColumn('report_id', 'text')
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('expires_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('orders_expires_at').on('orders').column('expires_at').execute();
      },
    },
    '0004_evidence_chains': {
      async up(db: Kysely<any>) {
        // No foreign key to decisions: purging a policy deletes its decisions, and the chains
        // of that policy go with them (maintenance deletes the chains first).
        await db.schema
          .createTable('evidence_chains')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('policy_id', 'text', (c) => c.notNull().references('policies.id'))
          .addColumn('request_id', 'text', (c) => c.notNull())
          .addColumn('decision_id', 'text', (c) => c.notNull())
          .addColumn('intent', 'text', (c) => c.notNull())
          .addColumn('intent_digest', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .execute();
        // One chain per requestId per policy, enforced by the database.
        await db.schema.createIndex('evidence_chains_policy_request').unique().on('evidence_chains').columns(['policy_id', 'request_id']).execute();
        await db.schema
          .createTable('evidence_events')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('chain_id', 'text', (c) => c.notNull().references('evidence_chains.id'))
          .addColumn('sequence', 'integer', (c) => c.notNull())
          .addColumn('event_type', 'text', (c) => c.notNull())
          .addColumn('body', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('prev_hash', 'text', (c) => c.notNull())
          .addColumn('hash', 'text', (c) => c.notNull())
          .execute();
        // An event can only follow the one before it: two appends racing for a sequence cannot both commit.
        await db.schema.createIndex('evidence_events_chain_sequence').unique().on('evidence_events').columns(['chain_id', 'sequence']).execute();
      },
    },
    '0005_evidence_settlement_claims': {
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('evidence_settlement_claims')
          .addColumn('tx_hash', 'text', (c) => c.notNull())
          .addColumn('log_index', 'integer', (c) => c.notNull())
          .addColumn('chain_id', 'text', (c) => c.notNull().references('evidence_chains.id'))
          .addColumn('created_at', 'text', (c) => c.notNull())
          // One transfer, one chain: the database refuses a second claim.
          .addPrimaryKeyConstraint('evidence_settlement_claims_pk', ['tx_hash', 'log_index'])
          .execute();
        await db.schema.createIndex('evidence_settlement_claims_chain').on('evidence_settlement_claims').column('chain_id').execute();
        // Chains reconciled as MATCH before this table existed hold their transfers too, oldest
        // first, so a new chain cannot claim a payment an existing one already settled.
        const matches = await db
          .selectFrom('evidence_events')
          .select(['chain_id', 'body', 'created_at'])
          .where('event_type', '=', 'SETTLEMENT_RECONCILED')
          .orderBy('created_at')
          .orderBy('id')
          .execute();
        for (const e of matches as Array<{ chain_id: string; body: string; created_at: string }>) {
          const o = JSON.parse(e.body) as SettlementObservation;
          if (o.result !== 'MATCH') continue;
          for (const t of payingTransfers(o)) {
            const res = await db
              .insertInto('evidence_settlement_claims')
              .values({ tx_hash: o.txHash.toLowerCase(), log_index: t.logIndex, chain_id: e.chain_id, created_at: e.created_at })
              .onConflict((oc: any) => oc.columns(['tx_hash', 'log_index']).doNothing())
              .executeTakeFirst();
            if (Number(res.numInsertedOrUpdatedRows ?? 0) > 0) break;
          }
        }
      },
    },
    '0006_partial_approval_index': {
      async up(db: Kysely<any>) {
        // Only HUMAN_APPROVAL decisions have an approval status, and only they are listed by it:
        // every APPROVE or BLOCK decision wrote a page of this index for nothing.
        await db.schema.dropIndex('decisions_policy_approval').ifExists().execute();
        await db.schema
          .createIndex('decisions_policy_approval')
          .on('decisions')
          .columns(['policy_id', 'approval_status', 'seq'])
          .where(sql.ref('approval_status'), 'is not', null)
          .execute();
      },
    },
    '0007_list_index_not_for_lookups': {
      async up(db: Kysely<any>) {
        // (policy_id, seq) orders a policy's decisions for the list, but PostgreSQL also chose it
        // for the requestId lookup of every decision: planned while the table was empty, the two
        // indexes on policy_id cost the same, and the cached plan then read every decision of
        // the policy to find one requestId (the decision rate fell as history grew, until an
        // ANALYZE replanned it). A partial index is only usable by a query whose WHERE implies
        // its predicate; only the list says `seq > 0`, so the lookup can use no index but the
        // unique (policy_id, request_id) one. (SQLite runs migrations outside a transaction:
        // ifExists lets a start that stopped between the two statements run this again.)
        await db.schema.dropIndex('decisions_policy_seq').ifExists().execute();
        await db.schema.createIndex('decisions_policy_seq').on('decisions').columns(['policy_id', 'seq']).where(sql<boolean>`seq > 0`).execute();
      },
    },
  };
}

export async function migrateToLatest(db: Kysely<any>, dialect: Dialect, pgSchema?: string): Promise<void> {
  const all = migrations(dialect);
  // Kysely looks for its bookkeeping tables across all schemas unless told which one is ours.
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => all },
    ...(pgSchema ? { migrationTableSchema: pgSchema } : {}),
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`database migration ${failed} failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}
