import pg from 'pg';

/** The database (or the disk under it) failed; no write of the request can be counted on. */
export class StorageFailure extends Error {}

/**
 * PostgreSQL error classes that mean the database could not do the work right now, not that the
 * statement was wrong: 08 connection exception, 40 transaction rollback (serialization failure,
 * deadlock), 53 insufficient resources, 55P03 lock not available, 57 operator intervention
 * (query cancelled, server shutting down), 58 system error, 25P03 (the server ended a
 * transaction left idle too long: an instance that stalled mid-transaction), and 25006 (a
 * read-only transaction: a database set read-only, when its storage is full say, or a standby).
 */
const PG_UNAVAILABLE = /^(08|40|53|57|58)|^55P03$|^25P03$|^25006$/;
/** SQLite result codes (and their extended forms) that mean the same. */
const SQLITE_UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|IOERR|FULL|CANTOPEN|READONLY|PROTOCOL|NOMEM|CORRUPT|NOTADB)/;
/** Transport errors of a connection to PostgreSQL. */
const SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
/** node-postgres's own connection and pool errors, which carry no code. */
const PG_CLIENT_ERRORS =
  /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed|Cannot use a pool after calling end|Query read timeout)/;

/**
 * Whether `err` is the storage failing rather than the service's own code: such a request is
 * answered 503 storage_unavailable (retry later), not 500. A constraint or SQL error stays a 500:
 * it is a defect, and retrying would not help.
 */
export function isStorageFailure(err: unknown): boolean {
  if (err instanceof StorageFailure) return true;
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (err instanceof pg.DatabaseError) return typeof code === 'string' && PG_UNAVAILABLE.test(code);
  if (err.name === 'SqliteError') return typeof code === 'string' && SQLITE_UNAVAILABLE.test(code);
  if (typeof code === 'string' && SOCKET_ERRORS.has(code)) return true;
  return PG_CLIENT_ERRORS.test(err.message);
}
