import { canonicalJson } from '../../platform/canonical.js';
import { parseUsdc } from '../../platform/money.js';
import { judgePayment, type Finality, type PaymentDecision, type PaymentEvidence } from '../reports/payment-proof.js';
import { publicTransfer } from '../reports/usdc-transfers.js';
import type { Intent } from './hashing.js';

/**
 * Settlement matching: what a transaction shows against the chain's immutable intent, and what
 * a new submission may do given the settlement evidence already recorded. Pure.
 */

export const SETTLEMENT_RESULTS = ['MATCH', 'MISMATCH', 'PENDING', 'FAILED', 'UNKNOWN'] as const;
export type SettlementResult = (typeof SETTLEMENT_RESULTS)[number];

/** Results that no later reading of their transaction can change: the same txHash again answers the recorded evidence. */
export const FINAL_RESULTS: ReadonlySet<SettlementResult> = new Set(['MATCH', 'MISMATCH', 'FAILED']);

/**
 * The result that closes a chain's settlement: after a MATCH, another transaction is a conflict.
 * A MISMATCH or a FAILED says only that its transaction did not pay the intent (a payment that
 * reverted and was sent again, a wrong hash submitted); the next transaction may still. Were they
 * closing, the chain would say FAILED for good of an intent that was paid, and an administrator
 * reading it could pay again.
 */
export const CLOSING_RESULT: SettlementResult = 'MATCH';

export type MismatchField = 'recipient' | 'amount' | 'expectedFrom' | 'minedAt';
export interface SettlementMismatch {
  field: MismatchField;
  expected: string;
  observed: string;
}

/** The body of a SETTLEMENT_RECONCILED event (before its receipt is added). */
export interface SettlementObservation {
  txHash: string;
  result: SettlementResult;
  reason: string;
  mismatches: SettlementMismatch[];
  confirmations: number;
  requiredConfirmations: number;
  blockNumber: number | null;
  /** When the transaction's block was mined (its timestamp); null when not mined or not read. */
  minedAt: string | null;
  /** How final its block is (latest, safe, finalized), as payment proofs report it; null when not mined. */
  finality: Finality | null;
  transfers: Array<{ from: string; to: string; amount: string; logIndex: number }>;
  expected: { recipient: string; amount: string; expectedFrom?: string };
  checkedAt: string;
}

const RESULT_OF: Record<PaymentDecision, SettlementResult> = {
  VERIFIED: 'MATCH',
  MISMATCH: 'MISMATCH',
  PENDING: 'PENDING',
  FAILED: 'FAILED',
  NOT_FOUND: 'UNKNOWN',
};

// judgePayment speaks of a payment's to/from; a chain speaks of its intent's fields.
const FIELD_OF = { to: 'recipient', amount: 'amount', from: 'expectedFrom' } as const;

export const UNREADABLE_REASON = 'the Base network could not be read; nothing was verified';

/**
 * How much earlier than its chain a transaction may have been mined and still settle the chain's
 * intent: the service's clock and the block timestamps of Base may disagree by that much. A
 * transaction mined before the intent existed is no payment of it (an agent could otherwise
 * point at anyone's earlier payment of that amount to that recipient); a margin too small would
 * turn a payment made right after its intent into a final MISMATCH on a clock that runs ahead.
 */
export const MINED_BEFORE_MARGIN_MS = 10 * 60_000;

/**
 * Judges `evidence` (null: the chain could not be read) against the intent with the payment-proof
 * rules: MATCH needs one USDC Transfer paying the recipient exactly the amount, from expectedFrom
 * when the intent names one, with at least `minConfirmations` confirmations; and, when the
 * evidence says when the transaction was mined, not earlier than MINED_BEFORE_MARGIN_MS before
 * the chain was created (a mismatch of field `minedAt` otherwise).
 */
export function reconcileSettlement(
  intent: Intent,
  txHash: string,
  evidence: { evidence: PaymentEvidence; blockNumber: bigint | null; minedAt?: Date | undefined } | null,
  minConfirmations: number,
  now: Date,
  chainCreatedAt: Date,
): SettlementObservation {
  const expected = expectedOf(intent);
  const base = { txHash: txHash.toLowerCase(), requiredConfirmations: minConfirmations, expected, checkedAt: now.toISOString() };
  if (!evidence) {
    return { ...base, result: 'UNKNOWN', reason: UNREADABLE_REASON, mismatches: [], confirmations: 0, blockNumber: null, minedAt: null, finality: null, transfers: [] };
  }
  const judged = judgePayment(
    { expectedTo: intent.recipient, expectedAmount: parseUsdc(intent.amount), expectedFrom: intent.expectedFrom },
    evidence.evidence,
    minConfirmations,
  );
  let result = RESULT_OF[judged.verdict.decision];
  let reason = judged.reason;
  const mismatches: SettlementMismatch[] = judged.mismatches.map((m) => ({ field: FIELD_OF[m.field], expected: m.expected, observed: m.observed }));
  const minedAt = evidence.minedAt ?? null;
  const earliest = new Date(chainCreatedAt.getTime() - MINED_BEFORE_MARGIN_MS);
  if ((result === 'MATCH' || result === 'MISMATCH') && minedAt && minedAt < earliest) {
    if (result === 'MATCH') reason = 'the transaction was mined before this evidence chain was created: it is not the payment of this intent';
    result = 'MISMATCH';
    mismatches.push({ field: 'minedAt', expected: `at or after ${earliest.toISOString()}`, observed: minedAt.toISOString() });
  }
  return {
    ...base,
    result,
    reason,
    mismatches,
    confirmations: evidence.evidence.confirmations,
    blockNumber: evidence.blockNumber === null ? null : Number(evidence.blockNumber),
    minedAt: minedAt?.toISOString() ?? null,
    finality: evidence.evidence.finality,
    transfers: evidence.evidence.transfers.map(publicTransfer),
  };
}

/** What a Transfer must be to pay `intent`: its recipient, exactly its amount, and its expectedFrom when it names one. */
export function expectedOf(intent: Intent): SettlementObservation['expected'] {
  return {
    recipient: intent.recipient.toLowerCase(),
    amount: intent.amount,
    ...(intent.expectedFrom ? { expectedFrom: intent.expectedFrom.toLowerCase() } : {}),
  };
}

/**
 * The Transfers of an observation that pay its intent: to the recipient, exactly the amount,
 * from expectedFrom when the intent names one. A MATCH claims the first of them that no other
 * evidence chain holds.
 */
export function payingTransfers(o: Pick<SettlementObservation, 'transfers' | 'expected'>): SettlementObservation['transfers'] {
  const eq = (a: string | undefined, b: string) => a !== undefined && a.toLowerCase() === b.toLowerCase();
  return o.transfers.filter(
    (t) => eq(o.expected.recipient, t.to) && t.amount === o.expected.amount && (!o.expected.expectedFrom || eq(o.expected.expectedFrom, t.from)),
  );
}

/** A recorded SETTLEMENT_RECONCILED event, as far as the plan needs it. */
export interface RecordedSettlement {
  evidenceId: string;
  body: Pick<SettlementObservation, 'txHash' | 'result' | 'reason' | 'mismatches' | 'confirmations'>;
}

export type SettlementPlan =
  | { action: 'replay'; recorded: RecordedSettlement }
  | { action: 'conflict'; detail: string }
  | { action: 'observe' }
  | { action: 'append' };

/**
 * Before reading the chain: a final result of this transaction (`ownFinal`, see finalResultOf)
 * answers it from storage; a MATCH refuses any other; otherwise (nothing yet, PENDING, UNKNOWN, or another transaction's MISMATCH or
 * FAILED) the transaction is read.
 */
export function planBeforeReading(latest: RecordedSettlement | undefined, txHash: string, ownFinal?: RecordedSettlement): SettlementPlan {
  // A transaction's final result need not be the latest event (another transaction may have
  // been reconciled since its MISMATCH or FAILED): it is answered from storage all the same.
  if (ownFinal) return { action: 'replay', recorded: ownFinal };
  if (latest && FINAL_RESULTS.has(latest.body.result)) {
    if (latest.body.txHash === txHash.toLowerCase()) return { action: 'replay', recorded: latest };
    if (latest.body.result === CLOSING_RESULT) {
      return { action: 'conflict', detail: `settlement ${latest.body.txHash} is already reconciled as ${latest.body.result}; read the chain` };
    }
  }
  return { action: 'observe' };
}

/**
 * Under the chain's lock, after reading: `seen` is the settlement evidence that was latest
 * before reading. If another submission for a different transaction was recorded meanwhile,
 * this one loses (exactly one winner). An unchanged reading of the same transaction appends
 * nothing and answers the recorded event.
 */
export function planAfterReading(
  latest: RecordedSettlement | undefined,
  seenEvidenceId: string | undefined,
  observation: SettlementObservation,
  ownFinal?: RecordedSettlement,
): SettlementPlan {
  const before = planBeforeReading(latest, observation.txHash, ownFinal);
  if (before.action !== 'observe') return before;
  if (!latest) return { action: 'append' };
  if (latest.evidenceId !== seenEvidenceId && latest.body.txHash !== observation.txHash) {
    return { action: 'conflict', detail: `conflicting concurrent settlement evidence (${latest.body.txHash}) was recorded first; read the chain` };
  }
  if (latest.body.txHash === observation.txHash && sameReading(latest.body, observation)) return { action: 'replay', recorded: latest };
  return { action: 'append' };
}

/** The last final result recorded for `txHash` among a chain's settlement events, if any. */
export function finalResultOf(recorded: readonly RecordedSettlement[], txHash: string): RecordedSettlement | undefined {
  const tx = txHash.toLowerCase();
  return [...recorded].reverse().find((r) => r.body.txHash.toLowerCase() === tx && FINAL_RESULTS.has(r.body.result));
}

function sameReading(a: RecordedSettlement['body'], b: SettlementObservation): boolean {
  const key = (x: RecordedSettlement['body']) =>
    canonicalJson({ result: x.result, reason: x.reason, mismatches: x.mismatches, confirmations: x.confirmations });
  return key(a) === key(b);
}
