import type { AppDeps } from '../../app.js';
import { digestOf } from '../../platform/canonical.js';
import { AppError } from '../../platform/errors.js';
import { formatUsdc } from '../../platform/money.js';
import type { PaymentGateway, PaymentPayload, PaymentRequirements } from '../../platform/x402.js';
import type { PaidReportRow, PaidReportStore } from './store.js';
import type { PaymentDeps } from './pipeline.js';
import { findSettlement } from './settlement-lookup.js';

export type Delivery =
  | { kind: 'report'; report: Record<string, unknown>; receipt: unknown; headers: Record<string, string> }
  | { kind: 'pending'; body: { status: 'pending'; orderId: string; recoveryKey?: string; retryAfter: number; reason: string }; headers: Record<string, string> }
  | { kind: 'error'; error: AppError; headers: Record<string, string> };

const RETRY_AFTER_SECONDS = 5;

/**
 * Turns stored reports into delivered ones once their payment is settled, and never otherwise.
 * Settling an EIP-3009 authorization twice cannot charge twice (the token burns its nonce), so
 * an uncertain settlement may be retried; what is never done is to release a report before the
 * chain or the facilitator has shown the payment.
 */
export class SettlementService {
  private readonly gateway: PaymentGateway;

  constructor(
    private readonly deps: PaymentDeps & AppDeps,
    private readonly store: PaidReportStore,
  ) {
    this.gateway = deps.gateway;
  }

  /** The first settlement of a freshly stored report. */
  async settleNew(row: PaidReportRow, recoveryKey: string | undefined): Promise<Delivery> {
    const { payload, requirements, extensions } = paymentOf(row);
    const outcome = await this.gateway.settle(payload, requirements, extensions ?? undefined);
    if (outcome.kind === 'settled') return this.finalize(row, outcome.transaction, outcome.payer || row.payer, outcome.headers);
    if (outcome.kind === 'pending') return this.pending(row, outcome.reason, outcome.transaction, recoveryKey);
    if (/nonce|already.?used/i.test(outcome.reason)) return this.pending(row, outcome.reason, undefined, recoveryKey);
    await this.store.markStatus(row.id, 'failed', { failure: outcome.reason }).catch(() => {});
    return failed(outcome.reason);
  }

  /**
   * Delivers a report stored earlier: at once when settled; otherwise look for the settlement on
   * chain (at `txHash` when the caller names it), then, for a settlement left uncertain, ask the
   * facilitator again.
   */
  async resume(row: PaidReportRow, txHash?: string): Promise<Delivery> {
    if (row.status === 'settled' && row.settle_tx) {
      return { kind: 'report', report: JSON.parse(row.report), receipt: JSON.parse(row.receipt ?? 'null'), headers: this.gateway.settlementHeaders(row.settle_tx, row.payer) };
    }
    if (row.status === 'failed') return failed(row.failure ?? 'settlement failed');

    const [payer = '', nonce = ''] = row.auth_id.split(':');
    const seen = await findSettlement(
      this.deps.chain,
      { payer, nonce, payTo: row.pay_to, amount: BigInt(row.price_micro), fromBlock: BigInt(row.from_block) },
      txHash,
    ).catch(() => ({ found: false as const, reason: 'the chain could not be read' }));
    if (seen.found && seen.confirmations >= this.deps.config.minConfirmations) {
      return this.finalize(row, seen.transaction, row.payer, this.gateway.settlementHeaders(seen.transaction, row.payer));
    }
    if (seen.found) return this.pending(row, `settlement seen with ${seen.confirmations} confirmation(s)`, seen.transaction);
    if (txHash) return this.pending(row, seen.reason);

    // A request that stored its report moments ago may still be settling it: leave it be.
    const age = this.deps.clock.now().getTime() - new Date(row.created_at).getTime();
    if (row.status === 'stored' && age < this.deps.config.facilitatorTimeoutMs + 30_000) {
      return this.pending(row, 'settlement in progress');
    }
    const { payload, requirements, extensions } = paymentOf(row);
    const outcome = await this.gateway.settle(payload, requirements, extensions ?? undefined);
    if (outcome.kind === 'settled') return this.finalize(row, outcome.transaction, outcome.payer || row.payer, outcome.headers);
    return this.pending(row, outcome.kind === 'pending' ? outcome.reason : `settlement not confirmed: ${outcome.reason}`, outcome.kind === 'pending' ? outcome.transaction : undefined);
  }

  private async finalize(row: PaidReportRow, transaction: string, payer: string, headers: Record<string, string>): Promise<Delivery> {
    const now = this.deps.clock.now();
    const report = JSON.parse(row.report) as Record<string, unknown>;
    const subject = {
      reportId: row.id,
      path: row.path,
      inputDigest: row.input_digest,
      reportDigest: digestOf(report),
      price: formatUsdc(BigInt(row.price_micro)),
      asset: 'USDC' as const,
      payer,
      payTo: row.pay_to,
      settlementTransaction: transaction,
      network: row.network,
      settledAt: now.toISOString(),
    };
    const receipt = { ...this.deps.receipts.sign('paid-report', row.id, subject, now), kind: 'paid-report' as const, subject };
    try {
      await this.store.markSettled(row.id, transaction, payer, receipt, now);
    } catch {
      // Paid, but not recorded: hold the report back until recovery can record it, so that the
      // stored state never lags behind a delivered one.
      return this.pending(row, 'settled; the record could not be written yet', transaction);
    }
    return { kind: 'report', report, receipt, headers };
  }

  private async pending(row: PaidReportRow, reason: string, tx?: string, recoveryKey?: string): Promise<Delivery> {
    if (row.status !== 'pending') await this.store.markStatus(row.id, 'pending', { tx, failure: reason }).catch(() => {});
    return {
      kind: 'pending',
      body: {
        status: 'pending',
        orderId: row.order_id ?? '',
        ...(recoveryKey ? { recoveryKey } : {}),
        retryAfter: RETRY_AFTER_SECONDS,
        reason,
      },
      headers: {},
    };
  }
}

function paymentOf(row: PaidReportRow): { payload: PaymentPayload; requirements: PaymentRequirements; extensions: Record<string, unknown> | null } {
  return JSON.parse(row.payment);
}

function failed(reason: string): Delivery {
  return { kind: 'error', error: new AppError('payment_invalid', `the payment could not be settled (${reason}); nothing was charged`), headers: {} };
}
