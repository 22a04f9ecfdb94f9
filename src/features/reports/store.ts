import type { Selectable } from 'kysely';
import type { Database } from '../../platform/db/database.js';
import type { PaidReportsTable } from '../../platform/db/schema.js';
import type { Receipt } from '../../platform/receipts.js';

export type PaidReportRow = Selectable<PaidReportsTable>;
export type ReportStatus = 'stored' | 'settled' | 'pending' | 'failed';

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
  async markSettled(id: string, tx: string, receipt: Receipt, now: Date): Promise<boolean> {
    const res = await this.database.db
      .updateTable('paid_reports')
      .set({ status: 'settled', settle_tx: tx, receipt: JSON.stringify(receipt), settled_at: now.toISOString(), failure: null })
      .where('id', '=', id)
      .where('status', '!=', 'settled')
      .executeTakeFirst();
    return Number(res.numUpdatedRows ?? 0n) === 1;
  }

  async markStatus(id: string, status: Exclude<ReportStatus, 'settled'>, detail: { tx?: string | undefined; failure?: string | undefined }): Promise<void> {
    await this.database.db
      .updateTable('paid_reports')
      // A transaction seen earlier is evidence worth keeping: a later answer without one keeps it.
      .set({ status, failure: detail.failure ?? null, ...(detail.tx ? { settle_tx: detail.tx } : {}) })
      .where('id', '=', id)
      .where('status', '!=', 'settled')
      .execute();
  }
}
