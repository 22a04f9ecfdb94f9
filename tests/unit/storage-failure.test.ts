import SQLite from 'better-sqlite3';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isStorageFailure, StorageFailure } from '../../src/platform/db/failures.js';

const pgError = (code: string) => Object.assign(new pg.DatabaseError('failed', 0, 'error'), { code });
const sqliteError = (code: string) => new SQLite.SqliteError('failed', code);
const socketError = (code: string) => Object.assign(new Error(`connect ${code}`), { code });

describe('isStorageFailure: 503 for the storage failing, 500 for a defect', () => {
  it.each([
    ['PostgreSQL query cancelled (57014)', pgError('57014')],
    ['PostgreSQL server shutting down (57P01)', pgError('57P01')],
    ['PostgreSQL connection failure (08006)', pgError('08006')],
    ['PostgreSQL deadlock (40P01)', pgError('40P01')],
    ['PostgreSQL serialization failure (40001)', pgError('40001')],
    ['PostgreSQL too many connections (53300)', pgError('53300')],
    ['PostgreSQL lock not available (55P03)', pgError('55P03')],
    ['PostgreSQL idle-in-transaction session ended (25P03)', pgError('25P03')],
    ['PostgreSQL read-only transaction (25006)', pgError('25006')],
    ['SQLite busy', sqliteError('SQLITE_BUSY')],
    ['SQLite I/O error', sqliteError('SQLITE_IOERR_WRITE')],
    ['SQLite disk full', sqliteError('SQLITE_FULL')],
    ['a refused connection', socketError('ECONNREFUSED')],
    ['a reset connection', socketError('ECONNRESET')],
    ['a dropped PostgreSQL connection', new Error('Connection terminated unexpectedly')],
    ['an exhausted pool', new Error('timeout exceeded when trying to connect')],
    ['a failed WAL sync', new StorageFailure('fsync of the SQLite WAL failed')],
  ])('%s is a storage failure', (_name, err) => {
    expect(isStorageFailure(err)).toBe(true);
  });

  it.each([
    ['PostgreSQL unique violation (23505)', pgError('23505')],
    ['PostgreSQL syntax error (42601)', pgError('42601')],
    ['PostgreSQL invalid input (22P02)', pgError('22P02')],
    ['SQLite constraint', sqliteError('SQLITE_CONSTRAINT_UNIQUE')],
    ['SQLite SQL error', sqliteError('SQLITE_ERROR')],
    ['a TypeError', new TypeError('x is undefined')],
    ['an Error with no code', new Error('something else')],
    ['a string', 'Connection terminated'],
    ['undefined', undefined],
  ])('%s is not', (_name, err) => {
    expect(isStorageFailure(err)).toBe(false);
  });
});
