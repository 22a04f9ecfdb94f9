import { sql, type Kysely, type Transaction } from 'kysely';
import type { Database } from './database.js';
import type { DB } from './schema.js';

export type Tx = Kysely<DB> | Transaction<DB>;

/**
 * Runs `fn` in a transaction that holds the write lock from its first statement. SQLite gets
 * BEGIN IMMEDIATE, so a read-then-write never races another writer (not even in another
 * process); PostgreSQL callers take row locks with `lockForUpdate`.
 */
export async function writeTransaction<T>(database: Database, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (database.dialect === 'postgres') return database.db.transaction().execute(fn);
  return database.db.connection().execute(async (conn) => {
    await sql`begin immediate`.execute(conn);
    try {
      const result = await fn(conn);
      await sql`commit`.execute(conn);
      return result;
    } catch (err) {
      await sql`rollback`.execute(conn).catch(() => {});
      throw err;
    }
  });
}
