import { sql, type Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { DB } from '../../src/platform/db/schema.js';
import { createTestDatabase, testDialect } from '../helpers/db.js';
import { suiteFixture } from '../helpers/suite.js';

/** The text of the plan `explain` (PostgreSQL) or `explain query plan` (SQLite) gives. */
async function planOf(db: Kysely<DB>, query: string, setup: string[] = []): Promise<string> {
  return db.connection().execute(async (conn) => {
    for (const s of setup) await sql.raw(s).execute(conn);
    const prefix = testDialect === 'postgres' ? 'explain ' : 'explain query plan ';
    const { rows } = await sql.raw<Record<string, unknown>>(prefix + query).execute(conn);
    return rows.map((r) => String(r['QUERY PLAN'] ?? r.detail)).join('\n');
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

  it('the requestId lookup can only use the unique (policy_id, request_id) index, even planned on an empty table', async () => {
    const lookup = `select id from decisions where policy_id = 'sgp_x' and request_id = 'r1'`;
    const setup = testDialect === 'postgres' ? ['set plan_cache_mode = force_generic_plan', 'set enable_seqscan = off'] : [];
    const plan = await planOf(t.db, lookup, setup);
    expect(plan).toContain('decisions_policy_request');
    expect(plan).not.toContain('decisions_policy_seq');
  });

  it('the list of a policy, newest first, still reads the (policy_id, seq) index', async () => {
    const list = `select * from decisions where policy_id = 'sgp_x' and seq > 0 and seq < 500 order by seq desc limit 51`;
    const setup = testDialect === 'postgres' ? ['set enable_seqscan = off', 'set enable_sort = off'] : [];
    expect(await planOf(t.db, list, setup)).toContain('decisions_policy_seq');
  });
});
