import { Migrator, sql, type Kysely, type Migration } from 'kysely';
import type { Dialect } from './database.js';

/**
 * Migrations run at start, in order, once each. They are written once for both databases:
 * types are chosen so that SQLite and PostgreSQL read them the same way.
 */
function migrations(dialect: Dialect): Record<string, Migration> {
  const autoId = dialect === 'sqlite' ? 'integer primary key autoincrement' : 'bigserial primary key';
  return {
    '0001_foundation': {
      async up(db: Kysely<any>) {
        await db.schema
          .createTable('kv')
          .addColumn('key', 'text', (c) => c.primaryKey())
          .addColumn('value', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema
          .createTable('pilot_leads')
          .addColumn('seq', sql.raw(autoId))
          .addColumn('id', 'text', (c) => c.notNull().unique())
          .addColumn('email', 'text', (c) => c.notNull())
          .addColumn('company', 'text', (c) => c.notNull())
          .addColumn('monthly_decisions', 'text', (c) => c.notNull())
          .addColumn('needs', 'text', (c) => c.notNull())
          .addColumn('source', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('pilot_leads_created_at').on('pilot_leads').column('created_at').execute();
      },
    },
  };
}

export async function migrateToLatest(db: Kysely<any>, dialect: Dialect, pgSchema?: string): Promise<void> {
  const all = migrations(dialect);
  // Kysely looks for its bookkeeping tables across all schemas unless told which one is ours.
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => all },
    ...(pgSchema ? { migrationTableSchema: pgSchema } : {}),
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`database migration ${failed} failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}
