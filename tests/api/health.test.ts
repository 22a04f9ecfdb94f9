import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { sharedDatabase, testDialect } from '../helpers/db.js';

describe('health', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => {
    await t.close();
  });

  it('is alive and ready while the database answers', async () => {
    expect(json(await t.app.inject({ method: 'GET', url: '/healthz' }))).toEqual({ status: 'ok' });
    const ready = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
  });

  it('answers 503 with a problem body when the database is gone', async () => {
    const other = await createTestApp();
    await other.database.close();
    const res = await other.app.inject({ method: 'GET', url: '/readyz' });
    expect(res.statusCode).toBe(503);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(json(res).code).toBe('storage_unavailable');
    await other.app.close();
  });

  // A database set read-only (as some hosted ones are when their storage fills up) or a standby.
  it.skipIf(testDialect !== 'postgres')('a read-only PostgreSQL: not ready, and a write answers 503 storage_unavailable, not 500', async () => {
    // One connection, set read-only once the instance has started (its start writes).
    const shared = await sharedDatabase(t.database, { poolSize: 1 });
    const other = await createTestApp({ database: shared });
    await sql`set default_transaction_read_only = on`.execute(shared.db);
    try {
      const ready = await other.app.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(json(ready).code).toBe('storage_unavailable');
      const res = await other.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: { email: 'ops@example.com', company: 'Acme', monthlyDecisions: '1k-10k', needs: 'A bounded pilot of protected decisions.' } });
      expect(res.statusCode).toBe(503);
      expect(json(res).code).toBe('storage_unavailable');
    } finally {
      await other.app.close();
      await shared.drop();
    }
  });
});
