import type { Selectable } from 'kysely';
import type { Database } from '../../platform/db/database.js';
import type { PaidReportsTable } from '../../platform/db/schema.js';
import type { Receipt } from '../../platform/receipts.js';

export type PaidReportRow = Selectable<PaidReportsTable>;
export type ReportStatus = 'stored' | 'settled' | 'pending' | 'failed';

/** A stored report's id and payment. */
type PaymentOf = Pick<PaidReportRow, 'id' | 'payment'>;

/**
 * A stored payment (see PaidReportsTable.payment) without the authorization's signature. A report
 * settled or failed never sends its authorization again, and a failed one kept signed would let
 * anyone who reads the database submit it until its validBefore: the payer, told that nothing was
 * charged, would be charged after all. Its fields (payer, nonce, validBefore) stay.
 */
export function withoutSignature(payment: string): string {
  const stored = JSON.parse(payment) as { payload?: { payload?: Record<string, unknown> } };
  const inner = stored.payload?.payload;
  if (inner && typeof inner === 'object') delete inner.signature;
  return JSON.stringify(stored);
}

export class PaidReportStore {
  constructor(private readonly database: Database) {}

  byAuth(authId: string): Promise<PaidReportRow | undefined> {
    return this.database.db.selectFrom('paid_reports').selectAll().where('auth_id', '=', authId).executeTakeFirst();
  }

  byId(id: string): Promise<PaidReportRow | undefined> {
    return this.database.db.selectFrom('paid_reports').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /**
   * Stores a produced report before anything is settled. Returns false when the authorization is
   * already stored (a concurrent request with the same payment won the race).
   */
  async insert(row: PaidReportRow): Promise<boolean> {
    const res = await this.database.db
      .insertInto('paid_reports')
      .values(row)
      .onConflict((oc) => oc.column('auth_id').doNothing())
      .executeTakeFirst();
    return Number(res.numInsertedOrUpdatedRows ?? 0n) === 1;
  }

  /** Records the settlement once: false when the report was already settled (its receipt stands). */
  async markSettled(row: PaymentOf, tx: string, receipt: Receipt, now: Date): Promise<boolean> {
    const res = await this.database.db
      .updateTable('paid_reports')
      .set({ status: 'settled', settle_tx: tx, receipt: JSON.stringify(receipt), settled_at: now.toISOString(), failure: null, payment: withoutSignature(row.payment) })
      .where('id', '=', row.id)
      .where('status', '!=', 'settled')
      .executeTakeFirst();
    return Number(res.numUpdatedRows ?? 0n) === 1;
  }

  /**
   * Takes the right to send this report's authorization to the facilitator's settle: true unless
   * a settle was sent less than `leaseMs` ago (it may still be running there; a second one racing
   * it costs the facilitator a call and, on a real chain, possibly a reverted transaction) or the
   * report is settled or failed. Compare-and-set, so of concurrent replays only one settles.
   */
  async claimSettle(id: string, now: Date, leaseMs: number): Promise<boolean> {
    const res = await this.database.db
      .updateTable('paid_reports')
      .set({ settle_started_at: now.toISOString() })
      .where('id', '=', id)
      .where('status', 'not in', ['settled', 'failed'])
      .where((eb) => eb.or([eb('settle_started_at', 'is', null), eb('settle_started_at', '<=', new Date(now.getTime() - leaseMs).toISOString())]))
      .executeTakeFirst();
    return Number(res.numUpdatedRows ?? 0n) === 1;
  }

  /** Records the first complete delivery of the report (see PaidReportsTable.delivered_at). */
  async markDelivered(id: string, now: Date): Promise<void> {
    await this.database.db.updateTable('paid_reports').set({ delivered_at: now.toISOString() }).where('id', '=', id).where('delivered_at', 'is', null).execute();
  }

  /** Gives the lease taken at `startedAt` back (the facilitator has answered: it runs nothing more). */
  async releaseSettle(id: string, startedAt: string): Promise<void> {
    await this.database.db.updateTable('paid_reports').set({ settle_started_at: null }).where('id', '=', id).where('settle_started_at', '=', startedAt).execute();
  }

  async markStatus(row: PaymentOf, status: Exclude<ReportStatus, 'settled'>, detail: { tx?: string | undefined; failure?: string | undefined }): Promise<void> {
    await this.database.db
      .updateTable('paid_reports')
      // A transaction seen earlier is evidence worth keeping: a later answer without one keeps it.
      .set({ status, failure: detail.failure ?? null, ...(detail.tx ? { settle_tx: detail.tx } : {}), ...(status === 'failed' ? { payment: withoutSignature(row.payment) } : {}) })
      .where('id', '=', row.id)
      .where('status', '!=', 'settled')
      .execute();
  }
}
