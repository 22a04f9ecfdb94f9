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
  return database.db.connection().execute((conn) => sqliteTransaction(conn, fn));
}

async function sqliteTransaction<T>(conn: Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  await sql`begin immediate`.execute(conn);
  try {
    const result = await fn(conn);
    await sql`commit`.execute(conn);
    return result;
  } catch (err) {
    await sql`rollback`.execute(conn).catch(() => {});
    throw err;
  }
}

/**
 * writeTransaction for a caller that can wait for the disk without holding the database: the
 * transaction's `value` comes as soon as it has committed, and `durable` resolves once the
 * commit is on disk. **Acknowledge nothing of it before `durable` resolves**; then it is exactly
 * as durable as a commit under synchronous=FULL.
 *
 * On an SQLite file the commit runs under synchronous=NORMAL (its WAL frames are written, not
 * synced) and `durable` is an fdatasync of the WAL on the thread pool (WalSync), so the event
 * loop serves requests, and the next transaction can run, while the disk syncs. Other
 * connections and requests can read the committed rows before `durable` resolves, as they could
 * read any committed row; if the machine lost power in between, those rows would be gone, but
 * nobody had been told they were stored. On PostgreSQL (whose commit does not hold the event
 * loop) and in-memory SQLite the commit is the usual one and `durable` is already resolved.
 */
export async function writeTransactionDeferred<T>(database: Database, fn: (tx: Tx) => Promise<T>): Promise<{ value: T; durable: Promise<void> }> {
  const { walSync } = database;
  if (database.dialect === 'postgres' || !walSync) return { value: await writeTransaction(database, fn), durable: Promise.resolve() };
  // After a failed sync nothing more is written: it could never be acknowledged.
  if (walSync.failed) throw walSync.failed;
  const value = await database.db.connection().execute((conn) => walSync.unsynced(() => sqliteTransaction(conn, fn)));
  return { value, durable: walSync.barrier() };
}
