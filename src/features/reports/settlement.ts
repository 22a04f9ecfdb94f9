import type { ServerResponse } from 'node:http';
import type { AppDeps } from '../../app.js';
import { digestOf } from '../../platform/canonical.js';
import { AppError } from '../../platform/errors.js';
import { formatUsdc } from '../../platform/money.js';
import { UINT256_DIGITS_PATTERN } from '../../platform/schemas.js';
import type { Receipt } from '../../platform/receipts.js';
import type { PaymentGateway, PaymentPayload, PaymentRequirements } from '../../platform/x402.js';
import type { PaidReportRow, PaidReportStore } from './store.js';
import type { PaymentDeps } from './pipeline.js';
import { findSettlement, type LookupResult } from './settlement-lookup.js';

export type Delivery =
  | { kind: 'report'; reportId: string; report: Record<string, unknown>; receipt: unknown; headers: Record<string, string> }
  | { kind: 'pending'; body: { status: 'pending'; orderId: string; recoveryKey?: string; retryAfter: number; reason: string }; headers: Record<string, string> }
  | { kind: 'error'; error: AppError; headers: Record<string, string> };

/** A paid report's receipt, with the subject it signs. */
type PaidReceipt = Receipt & { subject: unknown };

const RETRY_AFTER_SECONDS = 5;
const UINT256_DIGITS = new RegExp(UINT256_DIGITS_PATTERN);
/**
 * After a settle is sent, how long no other settle of the same authorization is: the settle is up
 * to two facilitator calls of up to FACILITATOR_TIMEOUT_MS each (the SDK sends one more after
 * `settlement_pending`), and the facilitator may go on for a while after our call has given up.
 */
const settleLeaseMs = (facilitatorTimeoutMs: number) => 2 * facilitatorTimeoutMs + 30_000;

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

  /**
   * Records, once `res` (an answer carrying the report) has been written out in full, that the
   * report was delivered: PAID_REPLAY_WINDOW_SECONDS later its payment signature alone no longer
   * brings it back (see PaidReports.checkSamePurchase). An answer cut off before its end records
   * nothing, and neither does a failed write: the signature then still works, as it did before.
   */
  recordDelivery(res: ServerResponse, reportId: string): void {
    res.once('finish', () => {
      // Not an error answer sent instead (a report that failed to serialize, say).
      if (res.statusCode === 200) this.store.markDelivered(reportId, this.deps.clock.now()).catch(() => {});
    });
  }

  /** The first settlement of a freshly stored report. */
  async settleNew(row: PaidReportRow, recoveryKey: string | undefined): Promise<Delivery> {
    const outcome = await this.settle(row, row.created_at);
    if (outcome.kind === 'settled') return this.settledByFacilitator(row, outcome.transaction, recoveryKey);
    if (outcome.kind === 'pending') return this.pending(row, facilitatorReason(outcome.reason), outcome.transaction, recoveryKey);
    if (/nonce|already.?used/i.test(outcome.reason)) return this.pending(row, facilitatorReason(outcome.reason), undefined, recoveryKey);
    // "Nothing was charged" must be true before it is said: a rejected settle can still race a
    // transfer of the same authorization that did land (the payer, or another settle of it, may
    // have submitted it first; the loser then reverts as "transaction failed"). Ask the chain.
    const seen = await this.lookup(row, undefined, outcome.transaction);
    if (seen.found) return this.settledOnChain(row, seen, recoveryKey);
    const reason = facilitatorReason(outcome.reason);
    if ('unreadable' in seen) return this.pending(row, `settlement rejected (${reason}) but the chain could not be checked`, undefined, recoveryKey);
    // Not on chain yet is not "never": a facilitator can fail (an HTTP 500, say) after it has
    // broadcast. Only a refusal given before anything is sent makes the payment failed.
    if (!isDefiniteRefusal(outcome.reason)) return this.pending(row, `settlement uncertain (${reason})`, undefined, recoveryKey);
    await this.store.markStatus(row, 'failed', { failure: reason }).catch(() => {});
    return failed(reason);
  }

  /**
   * Delivers a report stored earlier: at once when settled; otherwise look for the settlement on
   * chain (at `txHash` when the caller names it), then, for a settlement left uncertain, ask the
   * facilitator again.
   */
  async resume(row: PaidReportRow, txHash?: string): Promise<Delivery> {
    if (row.status === 'settled' && row.settle_tx) return this.storedDelivery(row, row.settle_tx);
    // A request that stored its report moments ago may still be settling it: leave it be. Only
    // that request records the settlement's state meanwhile; were a concurrent replay to mark the
    // row "pending", the next replay would settle the same authorization a second time, racing
    // the first settle (which may then revert and be reported as failed). created_at is when the
    // row was stored, right before that settle started (not when its request began).
    const now = this.deps.clock.now();
    const settling = row.status === 'stored' && now.getTime() - new Date(row.created_at).getTime() < settleLeaseMs(this.deps.config.facilitatorTimeoutMs);

    // The chain is consulted even for a failed settlement: a payment that did land is never
    // answered "nothing was charged" (and `txHash` can prove it). A failed one is never retried.
    const seen = await this.lookup(row, txHash);
    if (seen.found) return this.settledOnChain(row, seen, undefined, !settling);
    if (row.status === 'failed') return failed(row.failure ?? 'settlement failed');
    // An authorization that can never charge anything makes the order failed (it may then be
    // paid again): cancelled by the payer, spent on another transfer, or still unused at a block
    // whose time is past its validBefore (USDC refuses it from then on). Chain time, not ours.
    const never =
      'spentElsewhere' in seen && seen.spentElsewhere ? seen.reason
      : 'unusedAt' in seen && seen.unusedAt !== undefined && this.pastValidBefore(row, seen.unusedAt) ? 'the payment authorization expired without being used'
      : undefined;
    if (!settling && never) {
      await this.store.markStatus(row, 'failed', { failure: never }).catch(() => {});
      return failed(never);
    }
    if (txHash) return this.pending(row, seen.reason, undefined, undefined, !settling);
    if (settling) return this.pending(row, 'settlement in progress', undefined, undefined, false);
    // One settle at a time, also once the row is pending: the last one sent may still be running
    // at the facilitator (our call timed out, theirs did not). Meanwhile replays only look on chain.
    const claimed = await this.store.claimSettle(row.id, now, settleLeaseMs(this.deps.config.facilitatorTimeoutMs)).catch(() => false);
    if (!claimed) return this.pending(row, 'settlement in progress', undefined, undefined, false);
    const outcome = await this.settle(row, now.toISOString());
    if (outcome.kind === 'settled') return this.settledByFacilitator(row, outcome.transaction);
    const reason = facilitatorReason(outcome.reason);
    return this.pending(row, outcome.kind === 'pending' ? reason : `settlement not confirmed: ${reason}`, outcome.kind === 'pending' ? outcome.transaction : undefined);
  }

  /**
   * A failed report's payment, looked for on chain once more before its order is paid again: the
   * report's delivery (or 202 while too shallow) when the payment landed after all, undefined when
   * it is not there. No second payment is taken on a guess: a chain that cannot be read is a 502.
   */
  async landedAfterRefusal(row: PaidReportRow): Promise<Delivery | undefined> {
    const seen = await this.lookup(row);
    if (seen.found) return this.settledOnChain(row, seen);
    if ('unreadable' in seen) throw new AppError('upstream_unavailable', "the chain could not be read to check this order's earlier payment; nothing was charged");
    return undefined;
  }

  /**
   * Sends the row's authorization to the facilitator's settle, under the lease taken at
   * `leaseStart`. A refusal is the facilitator's final answer to that call, so the lease is given
   * back and the next replay may settle again at once; a timeout, an unanswered call or
   * "settlement_pending" may still be running there, so the lease holds until it expires.
   */
  private async settle(row: PaidReportRow, leaseStart: string) {
    const { payload, requirements, extensions } = paymentOf(row);
    const outcome = await this.gateway.settle(payload, requirements, extensions ?? undefined);
    if (outcome.kind === 'failed') await this.store.releaseSettle(row.id, leaseStart).catch(() => {});
    return outcome;
  }

  /**
   * The facilitator says it settled in `transaction`. With MIN_CONFIRMATIONS at 1 its word is
   * taken (it answers once the transaction is mined, its first confirmation). Above 1 the
   * service reads the transaction on Base itself: the report is released once it settles this
   * authorization with enough confirmations, and is pending until then. The payer is always the
   * authorization's own, whatever the facilitator names.
   */
  private async settledByFacilitator(row: PaidReportRow, transaction: string, recoveryKey?: string): Promise<Delivery> {
    if (this.deps.config.minConfirmations <= 1) {
      return this.finalize(row, transaction, recoveryKey);
    }
    const seen = await this.lookup(row, transaction);
    if (seen.found) return this.settledOnChain(row, seen, recoveryKey);
    return this.pending(row, `settled by the facilitator, not yet seen on Base: ${seen.reason}`, transaction, recoveryKey);
  }

  /**
   * Records the settlement and releases the report. `recoveryKey` is the key of an order created
   * for this very request: when the record cannot be written, the 202 must still carry it (it is
   * shown once), or the caller who has just been charged could not restore the report.
   */
  private async finalize(row: PaidReportRow, transaction: string, recoveryKey?: string): Promise<Delivery> {
    const now = this.deps.clock.now();
    const report = JSON.parse(row.report) as Record<string, unknown>;
    const subject = {
      reportId: row.id,
      path: row.path,
      inputDigest: row.input_digest,
      reportDigest: digestOf(report),
      price: formatUsdc(BigInt(row.price_micro)),
      asset: 'USDC' as const,
      payer: row.payer,
      payTo: row.pay_to,
      settlementTransaction: transaction,
      network: row.network,
      settledAt: now.toISOString(),
    };
    const receipt = { ...this.deps.receipts.sign('paid-report', row.id, subject, now), kind: 'paid-report' as const, subject };
    let stored: PaidReportRow | undefined;
    try {
      // Only the first to record the settlement issues the receipt; a concurrent request that saw
      // the same settlement delivers that stored receipt, so one report never has two receipts.
      if (!(await this.store.markSettled(row, transaction, receipt, now))) stored = await this.store.byId(row.id);
    } catch {
      // Paid, but not recorded: hold the report back until recovery can record it, so that the
      // stored state never lags behind a delivered one.
      return this.pending(row, 'settled; the record could not be written yet', transaction, recoveryKey);
    }
    if (stored) {
      if (stored.status !== 'settled' || !stored.settle_tx) return this.pending(row, 'settled; the record could not be read back yet', transaction, recoveryKey);
      return this.storedDelivery(stored, stored.settle_tx);
    }
    return { kind: 'report', reportId: row.id, report, receipt, headers: this.gateway.settlementHeaders(transaction, row.payer) };
  }

  /**
   * A settled report as stored. Its receipt is signed again when the key that signed it is not
   * ours any more (replaced, or withdrawn with `paywarden receipt-key withdraw`, when it would
   * never verify again): the same receipt under the current key, the same for every reader.
   */
  private storedDelivery(row: PaidReportRow, settleTx: string): Delivery {
    const stored = JSON.parse(row.receipt ?? 'null') as PaidReceipt | null;
    const receipt = stored && this.deps.receipts.current(stored);
    return { kind: 'report', reportId: row.id, report: JSON.parse(row.report), receipt, headers: this.gateway.settlementHeaders(settleTx, row.payer) };
  }

  /**
   * The on-chain settlement of this row's authorization: only at `txHash` when the caller names
   * one; else at the transaction the facilitator named (`knownTx`, or the one stored with the
   * row) or wherever the chain has it.
   */
  private async lookup(row: PaidReportRow, txHash?: string, knownTx?: string): Promise<LookupResult | { found: false; reason: string; unreadable: true }> {
    const [payer = '', nonce = ''] = row.auth_id.split(':');
    return findSettlement(
      this.deps.chain,
      { payer, nonce, payTo: row.pay_to, amount: BigInt(row.price_micro), fromBlock: BigInt(row.from_block) },
      // At most one block a second over the recovery period (Base makes one every 2 s).
      { txHash, knownTx: knownTx ?? row.settle_tx, logBlockRange: this.deps.config.rpcLogBlockRange, maxSpanBlocks: this.deps.config.recoveryTtlSeconds },
    ).catch(() => ({ found: false as const, reason: 'the chain could not be read', unreadable: true as const }));
  }

  /**
   * Whether chain time `blockTime` (seconds) is past the row's validBefore, with a minute's
   * margin should that block be replaced by one with an earlier time.
   */
  private pastValidBefore(row: PaidReportRow, blockTime: bigint): boolean {
    const auth = (paymentOf(row).payload as { payload?: { authorization?: { validBefore?: unknown } } }).payload?.authorization;
    const text = typeof auth?.validBefore === 'string' || typeof auth?.validBefore === 'number' ? String(auth.validBefore) : '';
    // Digits as the schema took them (rows stored before it refused padded ones may have zeros).
    if (!UINT256_DIGITS.test(text)) return false;
    return blockTime > BigInt(text) + 60n;
  }

  /** A settlement seen on chain: released with enough confirmations, pending before that. */
  private settledOnChain(row: PaidReportRow, seen: { transaction: string; confirmations: number }, recoveryKey?: string, record = true): Promise<Delivery> {
    if (seen.confirmations >= this.deps.config.minConfirmations) {
      return this.finalize(row, seen.transaction, recoveryKey);
    }
    return this.pending(row, `settlement seen with ${seen.confirmations} confirmation(s)`, seen.transaction, recoveryKey, record);
  }

  private async pending(row: PaidReportRow, reason: string, tx?: string, recoveryKey?: string, record = true): Promise<Delivery> {
    if (record && row.status !== 'pending') await this.store.markStatus(row, 'pending', { tx, failure: reason }).catch(() => {});
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

/**
 * Refusals a facilitator gives before it sends anything: the authorization itself is unusable
 * (bad signature, wrong amount or recipient, expired, unfunded, wrong scheme or network), or its
 * simulation failed. Only these make a payment "failed, nothing charged".
 *
 * Everything else leaves the payment uncertain, in particular the exact scheme's
 * `invalid_exact_evm_transaction_failed` (sending threw, possibly after the transaction was
 * broadcast) and `invalid_exact_evm_transfer_event_mismatch` (a transaction that was mined), a
 * nonce already used, and any reason this list does not know: the caller then gets a recovery
 * order instead of a 402 that would make its client pay again.
 */
const PRE_BROADCAST_REFUSALS = new Set([
  // x402 core and any scheme
  'insufficient_funds',
  'invalid_network',
  'invalid_payload',
  'invalid_payment_requirements',
  'invalid_scheme',
  'invalid_x402_version',
  'unsupported_scheme',
  'unsupported_payload_type',
  'asset_not_deployed_contract',
  // the exact EVM scheme (EIP-3009)
  'invalid_exact_evm_scheme',
  'invalid_exact_evm_network_mismatch',
  'invalid_exact_evm_missing_eip712_domain',
  'invalid_exact_evm_recipient_mismatch',
  'invalid_exact_evm_signature',
  'invalid_exact_evm_failed_to_parse_signature',
  'invalid_exact_evm_payload_authorization_valid_before',
  'invalid_exact_evm_payload_authorization_valid_after',
  'invalid_exact_evm_authorization_value',
  'invalid_exact_evm_payload_authorization_value_mismatch',
  'invalid_exact_evm_payload_undeployed_smart_wallet',
  'invalid_exact_evm_token_name_mismatch',
  'invalid_exact_evm_token_version_mismatch',
  'invalid_exact_evm_eip3009_not_supported',
  'invalid_exact_evm_insufficient_balance',
  'invalid_exact_evm_transaction_simulation_failed',
  // the devnet facilitator's injected refusal (src/devnet/facilitator.ts), made before sending
  'devnet_fault_injected',
]);

export function isDefiniteRefusal(reason: string): boolean {
  return PRE_BROADCAST_REFUSALS.has(reason);
}

/**
 * A facilitator's reason as callers see it and as it is stored: x402 reasons are short
 * snake_case codes (`invalid_exact_evm_payload_signature`, `settlement_pending`). Any other text
 * is the facilitator's own prose, of any length, and may quote a URL or a key: it is not passed on.
 */
export function facilitatorReason(reason: string): string {
  return /^[a-z0-9_]{1,80}$/.test(reason) ? reason : 'the facilitator gave a reason that is not an x402 code';
}

function failed(reason: string): Delivery {
  return { kind: 'error', error: new AppError('payment_invalid', `the payment could not be settled (${reason}); nothing was charged`), headers: {} };
}
