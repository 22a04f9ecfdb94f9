import { sql } from 'kysely';
import { expect, it } from 'vitest';
import { migrateToLatest } from '../../src/platform/db/migrations.js';
import { createTestApp } from '../helpers/app.js';
import { suiteFixture } from '../helpers/suite.js';

const t = suiteFixture(() => createTestApp());

const row = (id: string, status: string, settledAt: string | null) => ({
  id, path: '/api/quick-check', input_digest: 'sha256:x', input: '{}', report: '{}', receipt: null, price_micro: 1000n, network: 'eip155:8453',
  pay_to: '0x5', payer: '0x1', auth_id: `0x1:${id}`, payment_digest: 'sha256:y', payment: '{}', status, settle_tx: settledAt ? `0x${'ab'.repeat(32)}` : null,
  failure: null, from_block: 1n, order_id: null, created_at: '2026-01-01T00:00:00.000Z', settled_at: settledAt, settle_started_at: null, delivered_at: null,
});

// Migration 0013 records when a paid report was first delivered, which starts the window in which its
// payment signature (public on chain once settled) still brings it back. Reports settled before
// it were answered when they settled: without a value they would stay open to that signature for ever.
it('migration 0013 takes a report settled before it as delivered when it settled; others as not delivered yet', async () => {
  const settledAt = '2026-01-01T00:00:05.000Z';
  await t.database.db.insertInto('paid_reports').values([row('rpt_settled', 'settled', settledAt), row('rpt_pending', 'pending', null), row('rpt_failed', 'failed', null)]).execute();
  // As if the database had been made before 0013: no column, the migration not run.
  await t.database.db.schema.alterTable('paid_reports').dropColumn('delivered_at').execute();
  const table = sql.table(t.database.pgSchema ? `${t.database.pgSchema}.kysely_migration` : 'kysely_migration');
  await sql`delete from ${table} where name >= '0013'`.execute(t.database.db);
  await migrateToLatest(t.database.db, t.database.dialect, t.database.pgSchema);
  const rows = await t.database.db.selectFrom('paid_reports').select(['id', 'delivered_at']).orderBy('id').execute();
  expect(rows).toEqual([
    { id: 'rpt_failed', delivered_at: null },
    { id: 'rpt_pending', delivered_at: null },
    { id: 'rpt_settled', delivered_at: settledAt },
  ]);
});

// Migration 0014 drops the signature of the authorizations of reports settled or failed before it,
// which the service no longer keeps (a failed one could still be submitted until its validBefore).
it('migration 0014 drops the signature of settled and failed reports, and keeps that of a report still to settle', async () => {
  const signed = (id: string) => JSON.stringify({ payload: { x402Version: 2, payload: { signature: `0x${'5'.repeat(130)}`, authorization: { from: '0x1', nonce: id } } }, requirements: {}, extensions: null });
  const ids = ['rpt_s14', 'rpt_p14', 'rpt_f14'];
  await t.database.db
    .insertInto('paid_reports')
    .values([{ ...row(ids[0]!, 'settled', '2026-01-01T00:00:05.000Z'), payment: signed(ids[0]!) }, { ...row(ids[1]!, 'pending', null), payment: signed(ids[1]!) }, { ...row(ids[2]!, 'failed', null), payment: signed(ids[2]!) }])
    .execute();
  const table = sql.table(t.database.pgSchema ? `${t.database.pgSchema}.kysely_migration` : 'kysely_migration');
  await sql`delete from ${table} where name >= '0014'`.execute(t.database.db);
  await migrateToLatest(t.database.db, t.database.dialect, t.database.pgSchema);
  const rows = await t.database.db.selectFrom('paid_reports').select(['id', 'payment']).where('id', 'in', ids).execute();
  const inner = (id: string) => JSON.parse(rows.find((r) => r.id === id)!.payment).payload.payload;
  expect(inner('rpt_s14')).toEqual({ authorization: { from: '0x1', nonce: 'rpt_s14' } });
  expect(inner('rpt_f14')).toEqual({ authorization: { from: '0x1', nonce: 'rpt_f14' } });
  expect(inner('rpt_p14')).toHaveProperty('signature');
});

// A stored payment is the JSON text of what the payer sent, and JSON text may hold strings that
// PostgreSQL's jsonb refuses: "\u0000", or a lone surrogate such as "\ud800" (a payer's
// extensions or resource description, which nothing checks and which versions before 0014 kept
// as sent). One such report settled before the upgrade stopped every start of the new version
// ("database migration 0014_paid_report_unsigned_payments failed: unsupported Unicode escape
// sequence") until someone edited the database by hand.
it('migration 0014 drops the signature of a payment whose strings jsonb cannot hold (NUL, a lone surrogate), and keeps the rest as it was', async () => {
  const payment = (id: string) => ({
    payload: { x402Version: 2, resource: { url: 'http://x/api/quick-check', description: 'x\ud800y' }, payload: { signature: `0x${'6'.repeat(130)}`, authorization: { from: '0x1', nonce: id } }, extensions: { note: 'a\u0000b' } },
    requirements: {},
    extensions: null,
  });
  const ids = ['rpt_nul_settled', 'rpt_nul_failed', 'rpt_nul_pending'];
  await t.database.db
    .insertInto('paid_reports')
    .values([
      { ...row(ids[0]!, 'settled', '2026-01-01T00:00:05.000Z'), payment: JSON.stringify(payment(ids[0]!)) },
      { ...row(ids[1]!, 'failed', null), payment: JSON.stringify(payment(ids[1]!)) },
      { ...row(ids[2]!, 'pending', null), payment: JSON.stringify(payment(ids[2]!)) },
    ])
    .execute();
  const table = sql.table(t.database.pgSchema ? `${t.database.pgSchema}.kysely_migration` : 'kysely_migration');
  await sql`delete from ${table} where name >= '0014'`.execute(t.database.db);
  await migrateToLatest(t.database.db, t.database.dialect, t.database.pgSchema);
  const rows = await t.database.db.selectFrom('paid_reports').select(['id', 'payment']).where('id', 'in', ids).execute();
  const stored = (id: string) => JSON.parse(rows.find((r) => r.id === id)!.payment);
  for (const id of [ids[0]!, ids[1]!]) {
    const unsigned = payment(id);
    delete (unsigned.payload.payload as { signature?: string }).signature;
    expect(stored(id)).toEqual(unsigned);
  }
  expect(stored(ids[2]!)).toEqual(payment(ids[2]!));
});
