import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Names this run's PostgreSQL schemas and roles (pw_test_<runTag>_…). */
    pgRunTag: string;
  }
}

/**
 * Global set-up of the PostgreSQL project. Every database, schema and role a test run creates
 * carries the run's tag, and once the run ends everything with its tag is dropped, so that a test file that
 * failed or timed out before its own clean-up leaves nothing behind in the shared server; other
 * runs (their own tags) are never touched.
 */
export default function setup(project: TestProject) {
  const tag = randomBytes(4).toString('hex');
  project.provide('pgRunTag', tag);
  return async () => {
    const client = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
    await client.connect();
    const failed: string[] = [];
    try {
      // Databases first (a role that owns objects in one cannot be dropped), then schemas, then
      // roles; each on its own, so that one that cannot be dropped leaves the others dropped.
      const names = async (query: string, like: string) => (await client.query<{ name: string }>(query, [like])).rows.map((r) => r.name);
      const drops = [
        ...(await names('select datname as name from pg_database where datname like $1', `pw\\_test\\_db\\_${tag}\\_%`)).map((n) => `drop database if exists ${pg.escapeIdentifier(n)} with (force)`),
        ...(await names('select nspname as name from pg_namespace where nspname like $1', `pw\\_test\\_${tag}\\_%`)).map((n) => `drop schema if exists ${pg.escapeIdentifier(n)} cascade`),
        ...(await names('select rolname as name from pg_roles where rolname like $1', `pw\\_test\\_role\\_${tag}\\_%`)).map((n) => `drop role if exists ${pg.escapeIdentifier(n)}`),
      ];
      for (const drop of drops) await client.query(drop).catch((e: Error) => failed.push(`${drop}: ${e.message}`));
    } finally {
      await client.end();
    }
    if (failed.length) throw new Error(`could not drop what this test run created:\n${failed.join('\n')}`);
  };
}
