import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { DB } from '../../src/platform/db/schema.js';
import { createTestDatabase, testDialect, type TestDatabase } from '../helpers/db.js';
import { suiteFixture } from '../helpers/suite.js';

/**
 * The plan of `query` with its parameters: on SQLite `explain query plan` with the values in
 * place; on PostgreSQL the generic plan of a prepared statement (the plan a pooled connection
 * caches for a hot statement), with sequential scans and sorts ruled out so that only the index
 * choice is left to see on an empty table.
 */
async function planOf(db: Kysely<DB>, query: string, params: Array<[type: string, value: string | number]>): Promise<string> {
  return db.connection().execute(async (conn) => {
    if (testDialect !== 'postgres') {
      let i = 0;
      const inline = query.replace(/\$\d+/g, () => {
        const v = params[i++]![1];
        return typeof v === 'number' ? String(v) : `'${v}'`;
      });
      const { rows } = await sql.raw<{ detail: string }>(`explain query plan ${inline}`).execute(conn);
      return rows.map((r) => r.detail).join('\n');
    }
    for (const s of ['set plan_cache_mode = force_generic_plan', 'set enable_seqscan = off', 'set enable_sort = off']) await sql.raw(s).execute(conn);
    await sql.raw(`prepare plan_probe(${params.map(([t]) => t).join(', ')}) as ${query}`).execute(conn);
    try {
      const values = params.map(([, v]) => (typeof v === 'number' ? String(v) : `'${v}'`)).join(', ');
      const { rows } = await sql.raw<Record<string, string>>(`explain execute plan_probe(${values})`).execute(conn);
      return rows.map((r) => r['QUERY PLAN']).join('\n');
    } finally {
      await sql.raw('deallocate plan_probe').execute(conn);
      await sql.raw('reset all').execute(conn);
    }
  });
}

// Every protected decision looks its requestId up. On a policy with a long history that lookup
// must go straight to the one row, whatever the planner knows about the table: on PostgreSQL a
// plan made while the table was still empty stays cached on its connection, and such a plan once
// read every earlier decision of the policy for each new one.
describe('indexes of the decisions table', () => {
  const t = suiteFixture(async () => {
    const database = await createTestDatabase();
    return { db: database.db, close: () => database.drop() };
  });

  it('the requestId lookup can use no index but the unique (policy_id, request_id) one, even planned on an empty table', async () => {
    const plan = await planOf(t.db, 'select id from decisions where policy_id = $1 and request_id = $2', [
      ['text', 'sgp_x'],
      ['text', 'r1'],
    ]);
    expect(plan).toContain('decisions_policy_request');
    expect(plan).not.toContain('decisions_policy_seq');
  });

  it('the list of a policy, newest first, still reads the (policy_id, seq) index', async () => {
    const plan = await planOf(t.db, 'select * from decisions where policy_id = $1 and seq > 0 and seq < $2 order by seq desc limit 51', [
      ['text', 'sgp_x'],
      ['bigint', 500],
    ]);
    expect(plan).toContain('decisions_policy_seq');
  });
});

/**
 * The plans PostgreSQL runs inside `statement` (the statements of the functions it calls among
 * them), as auto_explain reports them to this client.
 */
async function nestedPlans(database: TestDatabase, statement: string, values: unknown[]): Promise<string[]> {
  const client = new pg.Client({ connectionString: database.url, options: `-c search_path=${database.pgSchema}` });
  await client.connect();
  const plans: string[] = [];
  client.on('notice', (n) => plans.push(n.message ?? ''));
  try {
    await client.query(`load 'auto_explain'`);
    for (const s of ['log_min_duration = 0', 'log_nested_statements = on', 'log_level = notice']) await client.query(`set auto_explain.${s}`);
    await client.query(statement, values);
  } finally {
    await client.end();
  }
  return plans;
}

// The decision functions of migration 0008 plan their statements once per connection, possibly
// while the tables are still empty; a sequential scan chosen then would read whole tables once
// they are large.
describe.skipIf(testDialect !== 'postgres')('plans of the PostgreSQL decision functions', () => {
  const t = suiteFixture(async () => {
    const database = await createTestDatabase();
    return { database, close: () => database.drop() };
  });

  it('read every table through its unique index, even planned while the tables are small', async () => {
    // A few rows in each table, analyzed: a sequential scan is then the cheapest plan for them.
    const { db } = t.database;
    for (let i = 0; i < 16; i++) {
      const id = `sgp_${i}`;
      const at = '2026-01-15T00:00:00.000Z';
      await db
        .insertInto('policies')
        .values({ id, name: 'p', agent_id: 'a', rules: '{}', revision: 1, status: 'active', agent_status: 'active', direct_checks: 0, admin_key_hash: `a${i}`, agent_key_hash: `g${i}`, created_at: at, updated_at: at, access_expires_at: at })
        .execute();
      await db.insertInto('policy_day_spend').values({ policy_id: id, day: '2026-01-15', spent_micro: 1n }).execute();
      await db.insertInto('policy_day_repeats').values({ policy_id: id, day: '2026-01-15', recipient: 'r', amount_micro: 1n, count: 1 }).execute();
    }
    await sql`analyze`.execute(db);
    const read = ['{sgp_x}', '{r1}', '{2026-01-15}', '{0x1111111111111111111111111111111111111111}', '{1000000}'];
    const snapshot = await nestedPlans(t.database, 'select * from paywarden_decision_snapshot($1, $2, $3, $4, $5)', read);
    // The check under the locks (a read that does not match, so it stores nothing).
    const check = await nestedPlans(
      t.database,
      `select paywarden_decide_if_unchanged($1, $2, $3, $4, $5, $6, $7, $8, $9, $10${', null'.repeat(25)})`,
      ['{sgp_x}', ...read, '{1}', '{null}', '{null}', '{null}'],
    );
    const plans = [...snapshot, ...check].join('\n');
    expect(plans).not.toContain('Seq Scan');
    for (const index of ['policies_pkey', 'decisions_policy_request', 'policy_day_spend_pk', 'policy_day_repeats_pk']) {
      expect(plans).toContain(`Index Scan using ${index}`);
    }
    expect(plans).toContain('LockRows');
  });
});

// The hourly purge keeps a tombstone of every policy and order it purged (they answer 410 for
// ever): what it looks for must come from an index of what is still due, not one that holds
// every tombstone (a million of them took 3 s each hour, on SQLite on the event loop).
describe('indexes of the hourly purge', () => {
  const t = suiteFixture(async () => {
    const database = await createTestDatabase();
    return { db: database.db, close: () => database.drop() };
  });

  it('expired policies not purged yet come from the partial index of what is due', async () => {
    const plan = await planOf(t.db, 'select id from policies where access_expires_at <= $1 and purged_at is null', [['text', '2026-01-15T00:00:00.000Z']]);
    expect(plan).toContain('policies_purge_due');
  });

  it('expired orders still holding their input come from the partial index of what is due', async () => {
    const plan = await planOf(t.db, "update orders set input = '', input_digest = '', report_id = null where expires_at <= $1 and input_digest <> ''", [
      ['text', '2026-01-15T00:00:00.000Z'],
    ]);
    expect(plan).toContain('orders_purge_due');
  });
});
