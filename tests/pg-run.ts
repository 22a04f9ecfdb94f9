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
 * Global set-up of the PostgreSQL project. Every schema and role a test run creates carries the
 * run's tag, and once the run ends everything with its tag is dropped, so that a test file that
 * failed or timed out before its own clean-up leaves nothing behind in the shared server; other
 * runs (their own tags) are never touched.
 */
export default function setup(project: TestProject) {
  const tag = randomBytes(4).toString('hex');
  project.provide('pgRunTag', tag);
  return async () => {
    const client = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
    await client.connect();
    try {
      const like = `pw\\_test\\_${tag}\\_%`;
      const schemas = await client.query<{ name: string }>('select nspname as name from pg_namespace where nspname like $1', [like]);
      for (const { name } of schemas.rows) await client.query(`drop schema if exists ${pg.escapeIdentifier(name)} cascade`);
      const roles = await client.query<{ name: string }>(`select rolname as name from pg_roles where rolname like $1`, [`pw\\_test\\_role\\_${tag}\\_%`]);
      for (const { name } of roles.rows) await client.query(`drop role if exists ${pg.escapeIdentifier(name)}`);
    } finally {
      await client.end();
    }
  };
}
