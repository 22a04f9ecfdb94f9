import { sql, type Kysely, type Transaction } from 'kysely';
import type { Database } from './database.js';
import type { DB } from './schema.js';

export type Tx = Kysely<DB> | Transaction<DB>;

/**
 * Runs `fn` in a transaction that holds the write lock from its first statement, and resolves
 * once the commit is durable. SQLite gets BEGIN IMMEDIATE, so a read-then-write never races
 * another writer (not even in another process); PostgreSQL callers take row locks with
 * `lockForUpdate`.
 *
 * On an SQLite file the commit runs under synchronous=NORMAL (its WAL frames are written, not
 * synced), then an fdatasync of the WAL on the thread pool (WalSync) makes it exactly as durable
 * as a commit under synchronous=FULL before this resolves. The event loop serves requests, and
 * the connection serves other statements, while the disk syncs. Other requests can read the
 * committed rows before this resolves, as they could read any committed row; if the machine lost
 * power in between, those rows would be gone, but nobody had been told they were stored. After a
 * failed sync nothing more is written: it could never be acknowledged.
 */
export async function writeTransaction<T>(database: Database, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (database.dialect === 'postgres') return database.db.transaction().execute(fn);
  const { wal } = database;
  // In-memory SQLite: there is no disk to wait for.
  if (!wal) return database.db.connection().execute((conn) => sqliteTransaction(conn, fn));
  if (wal.sync.failed) throw wal.sync.failed;
  // A WAL past its restart size: wait for the checkpoint that lets this transaction start it over.
  const restart = wal.restartPending();
  if (restart) await restart;
  const value = await database.db.connection().execute((conn) => wal.sync.unsynced(() => sqliteTransaction(conn, fn)));
  await wal.sync.barrier();
  return value;
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

/** Rows a purge deletes per write transaction (see purgeInChunks). */
export const PURGE_CHUNK_ROWS = 2_000;

/**
 * A purge of many rows as a series of short write transactions, each deleting at most
 * `PURGE_CHUNK_ROWS` (`deleteChunk` returns how many it deleted), with a turn of the event loop
 * between them. One statement deleting a policy's million decisions held the event loop (SQLite
 * runs on it) for seconds, so every request waited, it grew the WAL by hundreds of MB, and a
 * `paywarden purge` beside the service held the write lock that long (the service's writes then
 * failed after 5 s). Returns how many rows it deleted in all.
 */
export async function purgeInChunks(database: Database, deleteChunk: (tx: Tx, limit: number) => Promise<number>): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await writeTransaction(database, (tx) => deleteChunk(tx, PURGE_CHUNK_ROWS));
    total += n;
    if (n < PURGE_CHUNK_ROWS) return total;
    await new Promise((turn) => setImmediate(turn));
  }
}
