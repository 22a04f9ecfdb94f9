import { Migrator, sql, type DatabaseIntrospector, type Kysely, type Migration, type TableMetadata } from 'kysely';
import type { Dialect } from './database.js';
import { payingTransfers, type SettlementObservation } from '../../features/evidence/settlement.js';
import { claimsPerPolicy } from './claims-per-policy.js';
import { withoutSignature } from '../../features/reports/store.js';

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
        // unique (policy_id, request_id) one. (ifExists: versions before migrations ran in one
        // transaction on SQLite may have stopped between the two statements.)
        await db.schema.dropIndex('decisions_policy_seq').ifExists().execute();
        await db.schema.createIndex('decisions_policy_seq').on('decisions').columns(['policy_id', 'seq']).where(sql<boolean>`seq > 0`).execute();
      },
    },
    '0008_pg_decision_functions': {
      async up(db: Kysely<any>) {
        if (dialect !== 'postgres') return;
        await sql.raw(DECISION_SNAPSHOT_FUNCTION).execute(db);
        await sql.raw(STORE_DECISIONS_FUNCTION).execute(db);
        await sql.raw(DECIDE_IF_UNCHANGED_FUNCTION).execute(db);
      },
    },
    '0009_evidence_link_receipts': {
      async up(db: Kysely<any>) {
        // The service's signature over each event's hash, made when the event is appended. Events
        // stored before have none (null): they stay readable, and verify says their links are unsigned.
        await addColumnIfMissing(db, dialect, 'evidence_events', 'link_receipt');
      },
    },
    '0010_settlement_claims_per_policy': {
      async up(db: Kysely<any>) {
        await claimsPerPolicy(db, dialect);
      },
    },
    '0011_paid_report_settle_lease': {
      async up(db: Kysely<any>) {
        // When the last settle of a paid report was sent to the facilitator (see claimSettle).
        // Rows stored before have none: the first replay after the upgrade may settle them.
        await addColumnIfMissing(db, dialect, 'paid_reports', 'settle_started_at');
      },
    },
    '0012_purge_due_indexes': {
      async up(db: Kysely<any>) {
        // What the hourly purge looks for, without the tombstones it keeps for ever (purged
        // policies and orders answer 410): the indexes on the expiry times alone held every
        // tombstone, each read again every hour (3 s for a million purged policies, the event
        // loop held on SQLite). Re-runnable, as 0006 to 0011 are.
        await db.schema.createIndex('policies_purge_due').ifNotExists().on('policies').column('access_expires_at').where(sql<boolean>`purged_at is null`).execute();
        await db.schema.createIndex('orders_purge_due').ifNotExists().on('orders').column('expires_at').where(sql<boolean>`input_digest <> ''`).execute();
      },
    },
    '0013_paid_report_delivered': {
      async up(db: Kysely<any>) {
        // When a paid report's answer was first written out in full (see markDelivered). A report
        // settled before is taken as delivered when it settled: it was answered then (or its 202
        // gave the order's key), and its signature, public since, must not bring it back for ever.
        await addColumnIfMissing(db, dialect, 'paid_reports', 'delivered_at');
        await db.updateTable('paid_reports').set({ delivered_at: sql`settled_at` }).where('status', '=', 'settled').where('delivered_at', 'is', null).execute();
      },
    },
    '0014_paid_report_unsigned_payments': {
      async up(db: Kysely<any>) {
        // A settled or failed report's authorization is kept without its signature (see
        // withoutSignature in features/reports/store.ts); rows stored before lose it now.
        if (dialect === 'sqlite') {
          await db.updateTable('paid_reports').set({ payment: sql`json_remove(payment, '$.payload.payload.signature')` }).where('status', 'in', ['settled', 'failed']).where('payment', 'like', '%"signature"%').execute();
          return;
        }
        // PostgreSQL: as the service drops it, in JavaScript. A cast to jsonb refuses JSON text
        // that the payer may have sent and the service stored: a string with \u0000 or a lone
        // surrogate (in the payment's extensions, say), and one such report failed every start.
        for (let after = ''; ; ) {
          const rows: Array<{ id: string; payment: string }> = await db
            .selectFrom('paid_reports')
            .select(['id', 'payment'])
            .where('status', 'in', ['settled', 'failed'])
            .where('payment', 'like', '%"signature"%')
            .where('id', '>', after)
            .orderBy('id')
            .limit(1000)
            .execute();
          if (rows.length === 0) break;
          await sql`update paid_reports set payment = v.payment
            from unnest(${rows.map((r) => r.id)}::text[], ${rows.map((r) => withoutSignature(r.payment))}::text[]) as v(id, payment)
            where paid_reports.id = v.id`.execute(db);
          after = rows[rows.length - 1]!.id;
        }
      },
    },
  };
}

/**
 * Adds a nullable text column unless the table has it. Re-runnable, like 0006 to 0008: versions
 * before migrations ran in one transaction on SQLite (TransactionalDdlSqliteDialect) may have
 * stopped midway, and the next start runs this again.
 */
async function addColumnIfMissing(db: Kysely<any>, dialect: Dialect, table: string, column: string): Promise<void> {
  const existing =
    dialect === 'postgres'
      ? await sql`select 1 from information_schema.columns where table_schema = current_schema() and table_name = ${table} and column_name = ${column}`.execute(db)
      : await sql`select 1 from pragma_table_info(${table}) where name = ${column}`.execute(db);
  if (existing.rows.length === 0) await db.schema.alterTable(table).addColumn(column, 'text').execute();
}

/**
 * PostgreSQL: what a batch of decision requests needs to know, one row per request in order (n),
 * also for an unknown policy (its columns null): the policy, its row version (xmin), an earlier
 * decision with the requestId, the day's spend and the repeat count for the recipient and amount.
 *
 * A function, so that its plan is made once per connection (planning the same query anew for
 * every batch cost PostgreSQL more than running it: about 220 against 100 µs of CPU for a batch
 * of two, with EXPLAIN ANALYZE), with seq scans, hash and merge joins
 * off, so that the plan, made once, reads every table through its unique index whatever its
 * size was then. Its columns are fixed: a policy column added later comes with a new function,
 * so that instances of this version read what they know during a rolling deploy.
 */
const DECISION_SNAPSHOT_FUNCTION = `
create or replace function paywarden_decision_snapshot(
  q_policy_id text[], q_request_id text[], q_day text[], q_recipient text[], q_amount_micro bigint[]
) returns table (
  n bigint, id text, name text, agent_id text, rules text, revision integer, status text, agent_status text,
  direct_checks integer, admin_key_hash text, agent_key_hash text, created_at text, updated_at text,
  access_expires_at text, purged_at text, policy_xmin text, existing_id text, spent_micro bigint, repeat_count integer
) language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
#variable_conflict use_column
begin
  return query
  select t.n, p.id, p.name, p.agent_id, p.rules, p.revision, p.status, p.agent_status, p.direct_checks, p.admin_key_hash,
    p.agent_key_hash, p.created_at, p.updated_at, p.access_expires_at, p.purged_at, p.xmin::text,
    (select d.id from decisions d where d.policy_id = t.policy_id and d.request_id = t.request_id),
    (select s.spent_micro from policy_day_spend s where s.policy_id = t.policy_id and s.day = t.day),
    (select r.count from policy_day_repeats r
      where r.policy_id = t.policy_id and r.day = t.day and r.recipient = t.recipient and r.amount_micro = t.amount_micro)
  from unnest(q_policy_id, q_request_id, q_day, q_recipient, q_amount_micro)
    with ordinality as t(policy_id, request_id, day, recipient, amount_micro, n)
  left join policies p on p.id = t.policy_id
  order by t.n;
end $$`;

/** The arguments of paywarden_store_decisions: the decisions by column, the day's spend, the repeat counts. */
const STORE_PARAMETERS = [
  'd_id text[], d_policy_id text[], d_request_id text[], d_agent_id text[], d_recipient text[], d_amount_micro bigint[]',
  'd_request_digest text[], d_decision text[], d_reasons text[], d_policy_revision integer[], d_day text[]',
  'd_approval_status text[], d_approval_expires_at text[], d_approved_at text[], d_approval_note text[], d_created_at text[]',
  'd_receipt text[]',
  's_policy_id text[], s_day text[], s_spent_micro bigint[]',
  'r_policy_id text[], r_day text[], r_recipient text[], r_amount_micro bigint[], r_count integer[]',
].join(',\n  ');

/**
 * PostgreSQL: stores a batch of protected decisions and adds what they spent to the day's
 * counters, from one array per column (see writeMany in decisions.ts). Each budget row appears
 * once in its arrays: an upsert may not touch one row twice. Its statements are planned once per
 * connection; none of them reads a table but through a unique index.
 */
const STORE_DECISIONS_FUNCTION = `
create or replace function paywarden_store_decisions(
  ${STORE_PARAMETERS}
) returns void language plpgsql volatile
set plan_cache_mode = force_generic_plan
as $$
begin
  -- In the order the decisions were made: their seq orders the list.
  insert into decisions (id, policy_id, request_id, agent_id, recipient, amount_micro, request_digest, decision, reasons,
    policy_revision, day, approval_status, approval_expires_at, approved_at, approval_note, created_at, receipt)
  select t.id, t.policy_id, t.request_id, t.agent_id, t.recipient, t.amount_micro, t.request_digest, t.decision, t.reasons,
    t.policy_revision, t.day, t.approval_status, t.approval_expires_at, t.approved_at, t.approval_note, t.created_at, t.receipt
  from unnest(d_id, d_policy_id, d_request_id, d_agent_id, d_recipient, d_amount_micro, d_request_digest, d_decision, d_reasons,
    d_policy_revision, d_day, d_approval_status, d_approval_expires_at, d_approved_at, d_approval_note, d_created_at, d_receipt)
    with ordinality as t(id, policy_id, request_id, agent_id, recipient, amount_micro, request_digest, decision, reasons,
      policy_revision, day, approval_status, approval_expires_at, approved_at, approval_note, created_at, receipt, n)
  order by t.n;
  insert into policy_day_spend (policy_id, day, spent_micro)
  select * from unnest(s_policy_id, s_day, s_spent_micro)
  on conflict (policy_id, day) do update set spent_micro = policy_day_spend.spent_micro + excluded.spent_micro;
  insert into policy_day_repeats (policy_id, day, recipient, amount_micro, count)
  select * from unnest(r_policy_id, r_day, r_recipient, r_amount_micro, r_count)
  on conflict (policy_id, day, recipient, amount_micro) do update set count = policy_day_repeats.count + excluded.count;
end $$`;

/**
 * PostgreSQL: a batch of decisions made from a read (paywarden_decision_snapshot) taken WITHOUT
 * the policies' locks: one round trip for the read and one for this, instead of BEGIN, lock,
 * read, write, COMMIT. It takes the locks every writer of these rows takes (the policy rows, FOR
 * UPDATE, in id order), reads again with the same function, and stores the decisions only if
 * that read finds exactly what the batch was decided from, for every request of the batch: the
 * policy row version (xmin: any change to a policy makes a new one), the earlier decision with
 * the requestId, the day's spend and the repeat count. Otherwise it stores nothing and answers
 * false, and the batch is decided again under the locks. A VOLATILE function takes a new
 * snapshot for each statement, so the second read sees everything committed before the locks
 * were granted.
 */
const DECIDE_IF_UNCHANGED_FUNCTION = `
create or replace function paywarden_decide_if_unchanged(
  lock_ids text[],
  q_policy_id text[], q_request_id text[], q_day text[], q_recipient text[], q_amount_micro bigint[],
  q_policy_xmin text[], q_existing_id text[], q_spent_micro bigint[], q_repeat_count integer[],
  ${STORE_PARAMETERS}
) returns boolean language plpgsql volatile
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
as $$
begin
  perform 1 from policies where id = any(lock_ids) order by id for update;
  if exists (
    select 1
    from paywarden_decision_snapshot(q_policy_id, q_request_id, q_day, q_recipient, q_amount_micro) s
    full join unnest(q_policy_xmin, q_existing_id, q_spent_micro, q_repeat_count)
      with ordinality as q(policy_xmin, existing_id, spent_micro, repeat_count, n) on q.n = s.n
    where s.n is null or q.n is null
      or s.policy_xmin is distinct from q.policy_xmin or s.existing_id is distinct from q.existing_id
      or s.spent_micro is distinct from q.spent_micro or s.repeat_count is distinct from q.repeat_count
  ) then
    return false;
  end if;
  perform paywarden_store_decisions(${STORE_PARAMETERS.replace(/ [a-z]+\[\]/g, '')});
  return true;
end $$`;

/**
 * How long a PostgreSQL migration waits for a lock on a table before it gives up, and the start
 * tries again (see openDatabase). A migration's ALTER TABLE waits for every transaction using the
 * table (another client's long report query or pg_dump, say), and while it waits every other
 * query on the table queues behind it: running instances of the previous version answered 503
 * for as long as that transaction lasted. Kysely sets a lock timeout of an hour for the whole
 * migration transaction (for its advisory lock); each migration sets its own first.
 */
export const MIGRATION_LOCK_WAIT_MS = 2_000;

function migrator(db: Kysely<any>, dialect: Dialect, pgSchema?: string): Migrator {
  const all = migrations(dialect);
  if (dialect === 'postgres') {
    for (const [name, m] of Object.entries(all)) {
      all[name] = {
        async up(tx: Kysely<any>) {
          await sql.raw(`set local lock_timeout = ${MIGRATION_LOCK_WAIT_MS}`).execute(tx);
          await m.up(tx);
        },
      };
    }
  }
  // Kysely looks for its bookkeeping tables across all schemas unless told which one is ours.
  return new Migrator({
    db: pgSchema ? introspectingOnly(db, pgSchema) : db,
    provider: { getMigrations: async () => all },
    ...(pgSchema ? { migrationTableSchema: pgSchema } : {}),
  });
}

/**
 * `db`, whose introspection sees only `schema`. The migrator asks the introspector whether its
 * schema and its two bookkeeping tables exist, and Kysely's PostgreSQL introspector answers by
 * reading every column of every table in every schema of the server: on a shared server that
 * is everyone's catalogue at every start, and a schema another client dropped meanwhile failed
 * the whole start ("schema … does not exist", from pg_get_serial_sequence on a table it had
 * just listed). These two queries read the catalogue rows of one schema, and never resolve a
 * name of another.
 */
function introspectingOnly(db: Kysely<any>, schema: string): Kysely<any> {
  const introspection: DatabaseIntrospector = {
    async getSchemas() {
      const { rows } = await sql<{ name: string }>`select nspname as name from pg_catalog.pg_namespace where nspname = ${schema}`.execute(db);
      return rows;
    },
    async getTables() {
      const { rows } = await sql<{ name: string; isView: boolean }>`
        select c.relname as name, c.relkind = 'v' as "isView"
        from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
        where n.nspname = ${schema} and c.relkind in ('r', 'v', 'p')`.execute(db);
      return rows.map((r): TableMetadata => ({ name: r.name, isView: r.isView, schema, columns: [] }));
    },
    async getMetadata() {
      return { tables: await this.getTables() };
    },
  };
  // Kysely keeps its state in private fields: every other member is the original's, bound to it.
  return new Proxy(db, {
    get(target, prop) {
      if (prop === 'introspection') return introspection;
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** A database that does not hold this version's schema (see requireCurrentSchema). */
export class NotCurrentSchema extends Error {}

/**
 * Refuses, without writing anything, a database that does not hold this version's schema: one
 * with no migration records (another application's database, an empty file, the wrong schema of
 * the right server), one behind this version, or one ahead of it.
 */
export async function requireCurrentSchema(db: Kysely<any>, dialect: Dialect, pgSchema?: string): Promise<void> {
  const known = await migrator(db, dialect, pgSchema).getMigrations();
  const applied = known.filter((m) => m.executedAt !== undefined).length;
  if (applied === 0) throw new NotCurrentSchema('it holds no paywarden schema (no migration records)');
  if (applied < known.length) throw new NotCurrentSchema(`its schema is older than this version's (${applied} of ${known.length} migrations): start the service once to bring it up to date`);
  const table = pgSchema ? sql.table(`${pgSchema}.kysely_migration`) : sql.table('kysely_migration');
  const { rows } = await sql<{ n: number | bigint }>`select count(*) as n from ${table}`.execute(db);
  if (Number(rows[0]!.n) > known.length) throw new NotCurrentSchema('its schema was made by a newer version of paywarden');
}

export async function migrateToLatest(db: Kysely<any>, dialect: Dialect, pgSchema?: string): Promise<void> {
  const { error, results } = await migrator(db, dialect, pgSchema).migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName;
    const what = failed ? `database migration ${failed} failed` : 'database migrations could not start';
    throw new Error(`${what}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
}
