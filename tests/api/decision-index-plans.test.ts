import { sql, type Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { DB } from '../../src/platform/db/schema.js';
import { createTestDatabase, testDialect } from '../helpers/db.js';
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
