import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { openDatabase, type Database, type DatabaseOptions } from '../../src/platform/db/database.js';

/** A PostgreSQL schema or role name of this test run (tests/pg-run.ts drops them all when it ends). */
export const pgTestName = (prefix: string, tag: string) => `${prefix}_${inject('pgRunTag')}_${tag}`;

export const testDialect = (process.env.PAYWARDEN_TEST_DB ?? 'sqlite') as 'sqlite' | 'postgres';

export interface TestDatabase extends Database {
  /** The URL and options another service instance would use to share this database. */
  url: string;
  pgSchema?: string;
  /** Closes the connections and removes everything this database held. */
  drop(): Promise<void>;
}

/**
 * A fresh, empty database for one test file: an in-memory-like SQLite file in a temp folder, or
 * a PostgreSQL schema of its own so that parallel test files and CI runs never collide.
 */
export async function createTestDatabase(opts: { poolSize?: number } = {}): Promise<TestDatabase> {
  const tag = randomBytes(6).toString('hex');
  if (testDialect === 'postgres') {
    const url = process.env.TEST_DATABASE_URL;
    if (!url) throw new Error('PAYWARDEN_TEST_DB=postgres needs TEST_DATABASE_URL');
    const pgSchema = pgTestName('pw_test', tag);
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`create schema ${pgSchema}`);
    await admin.end();
    const database = await openDatabase(url, { pgSchema, poolSize: opts.poolSize ?? 10 });
    return {
      ...database,
      url,
      pgSchema,
      async drop() {
        await database.close();
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        await c.query(`drop schema if exists ${pgSchema} cascade`);
        await c.end();
      },
    };
  }
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), `paywarden-${tag}-`));
  const url = `sqlite:${join(dir, 'test.sqlite')}`;
  const database = await openDatabase(url);
  return {
    ...database,
    url,
    async drop() {
      await database.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * What a second service instance opens: its own connections to the same database (and
 * PostgreSQL schema), with its own options. Its drop() only closes them.
 */
export async function sharedDatabase(db: TestDatabase, opts: DatabaseOptions = {}): Promise<TestDatabase> {
  const schema = db.pgSchema ? { pgSchema: db.pgSchema } : {};
  const other = await openDatabase(db.url, { ...schema, ...opts });
  return { ...other, url: db.url, ...schema, drop: () => other.close() };
}
