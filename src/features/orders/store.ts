import { sql } from 'kysely';
import { randomBytes } from 'node:crypto';
import type { Database } from '../../platform/db/database.js';
import type { OrdersTable } from '../../platform/db/schema.js';
import { AppError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { hashKey, sameHash } from '../../platform/keys.js';

export type OrderRow = OrdersTable;

/** A recovery key: 32 random bytes, base64url; only its hash is stored. */
export function newRecoveryKey(): string {
  return `ork_${randomBytes(32).toString('base64url')}`;
}

/** A purged order keeps its row as a tombstone without its input (see purgeExpired). */
const isPurged = (row: Pick<OrderRow, 'input_digest'>) => row.input_digest === '';

export class OrderStore {
  constructor(
    private readonly database: Database,
    private readonly ttlSeconds: number,
  ) {}

  async create(path: string, input: unknown, inputDigest: string, now: Date, reportId: string | null = null): Promise<{ row: OrderRow; key: string }> {
    const key = newRecoveryKey();
    const row: OrderRow = {
      id: newId('ord'),
      key_hash: hashKey(key),
      path,
      input_digest: inputDigest,
      input: JSON.stringify(input),
      report_id: reportId,
      created_at: now.toISOString(),
      expires_at: new Date(now.getTime() + this.ttlSeconds * 1000).toISOString(),
    };
    await this.database.db.insertInto('orders').values(row).execute();
    return { row, key };
  }

  /**
   * The order for an id and key: 404 when either is wrong (never telling which), 410 when expired
   * or purged (whatever the clock says now: a system clock stepped back must not reopen it).
   */
  async open(id: string, key: string, now: Date): Promise<OrderRow> {
    const row = await this.database.db.selectFrom('orders').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row || !sameHash(row.key_hash, hashKey(key))) throw new AppError('not_found', 'unknown report or incorrect key');
    if (now.toISOString() >= row.expires_at || isPurged(row)) throw new AppError('recovery_expired', 'the recovery period of this order has ended');
    return row;
  }

  /**
   * Binds the order to the report its payment bought, only if it is still bound to what it was
   * when read (`order.report_id`: null, or a report whose payment failed, and failed still: not
   * found on chain by a recovery meanwhile). False when another payment got there first: two
   * payments must never be settled for one order.
   *
   * The recovery period starts again at `now`: a payment made just before the order expired,
   * whose settlement is uncertain (202, "restore the report"), may land only after that, and its
   * report must stay restorable through the order for a whole period.
   *
   * An order purged since it was read (its period ended while the payment was at the
   * facilitator) is never bound: that would renew a tombstone without its input. 410 then.
   */
  async bind(order: Pick<OrderRow, 'id' | 'expires_at' | 'report_id'>, reportId: string, now: Date): Promise<boolean> {
    const renewed = new Date(now.getTime() + this.ttlSeconds * 1000).toISOString();
    const res = await this.database.db
      .updateTable('orders')
      .set({ report_id: reportId, expires_at: renewed > order.expires_at ? renewed : order.expires_at })
      .where('id', '=', order.id)
      .where((eb) => {
        const earlier = order.report_id;
        if (earlier === null) return eb('report_id', 'is', null);
        return eb.and([
          eb('report_id', '=', earlier),
          eb.exists(eb.selectFrom('paid_reports').select('paid_reports.id').where('paid_reports.id', '=', earlier).where('paid_reports.status', '=', 'failed')),
        ]);
      })
      .where('input_digest', '!=', '')
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) === 1) return true;
    const current = await this.database.db.selectFrom('orders').select('input_digest').where('id', '=', order.id).executeTakeFirst();
    if (!current || isPurged(current)) throw new AppError('recovery_expired', 'the recovery period of this order ended while it was being paid; nothing was charged');
    return false;
  }

  /**
   * Removes what expired orders hold (the report input, its digest and the link to the paid
   * report). The row stays as a tombstone, as a purged policy's does: its id and key still answer
   * 410 "recovery period expired" rather than a 404 that would tell the caller its key is wrong.
   * Returns how many orders were purged now.
   */
  async purgeExpired(now: Date): Promise<number> {
    const res = await this.database.db
      .updateTable('orders')
      .set({ input: '', input_digest: '', report_id: null })
      .where('expires_at', '<=', now.toISOString())
      // As written, so that the partial index of migration 0012 serves it: the tombstones of
      // every order ever purged are not read again each hour.
      .where(sql<boolean>`input_digest <> ''`)
      .executeTakeFirst();
    return Number(res.numUpdatedRows);
  }
}
