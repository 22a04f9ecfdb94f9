import { decodeFunctionData, getAddress, parseAbi, type Hex } from 'viem';
import { formatUsdc } from '../../platform/money.js';
import { USDC_ADDRESS } from '../../platform/prices.js';
import type { ChainEvent, Intent } from './hashing.js';
import type { SettlementResult } from './settlement.js';

/** The summary of a chain and the advisory comparison of a preflight input with the intent. Pure. */

export const LIMITATIONS = {
  unknown: 'UNKNOWN is not verification: the transaction was not found or Base could not be read.',
  match: 'MATCH describes an observed USDC transfer; it is not permission to pay.',
  nothingExecuted: 'Nothing was signed, executed or authorized by this service (executionAuthorized is false); the decision is advisory evidence, not a payment.',
  notSubmitted: 'NOT_SUBMITTED: no settlement evidence was submitted.',
  noPreflight: 'No transaction preflight was attached.',
  preflightInput: 'The preflight covers the unsigned input with its own digest; the caller must verify that it represents the intended transaction.',
  pendingApproval: 'The decision needs an administrator (HUMAN_APPROVAL) and was not approved.',
  anyPayer: 'The intent names no expectedFrom: a MATCH shows that the recipient received the amount, not who paid it.',
  preflightNotIntent: 'The attached preflight is of a transaction that does NOT match the intent (see transactionPreflight.intentCheck.mismatches): its verdict is about that transaction, not about paying this intent.',
} as const;

export interface ChainView {
  evidenceChainId: string;
  intent: Intent;
  intentDigest: string;
  events: ChainEvent[];
}

type Approval = { status: string; expiresAt: string; approvedAt: string | null } | null;

export interface Summary {
  evidenceChainId: string;
  intentDigest: string;
  preAuthorization: Record<string, unknown> | null;
  transactionPreflight: Record<string, unknown> | null;
  settlement: Record<string, unknown> | null;
  reconciliation: 'NOT_SUBMITTED' | SettlementResult;
  limitations: string[];
  executionAuthorized: false;
}

const lastOf = (events: ChainEvent[], type: ChainEvent['eventType']) => events.filter((e) => e.eventType === type).at(-1);

/** `currentApproval`: the decision's approval state now (an administrator may have approved it since). */
export function summarise(chain: ChainView, currentApproval?: Approval): Summary {
  const precheck = lastOf(chain.events, 'PRECHECK_COMPLETED');
  const preflight = lastOf(chain.events, 'TRANSACTION_PREFLIGHT_COMPLETED');
  const settled = lastOf(chain.events, 'SETTLEMENT_RECONCILED');

  const decision = precheck?.body.decision as { decisionId: string; decision: string; reasons: string[]; policyRevision: number; approval: Approval } | undefined;
  const approval = currentApproval !== undefined ? currentApproval : (decision?.approval ?? null);
  const preAuthorization = decision
    ? {
        evidenceId: precheck!.evidenceId,
        decisionId: decision.decisionId,
        decision: decision.decision,
        reasons: decision.reasons,
        policyRevision: decision.policyRevision,
        approval,
        receiptId: (precheck!.body.receipt as { receiptId?: string } | undefined)?.receiptId ?? null,
        executionAuthorized: false,
      }
    : null;

  const p = preflight?.body as { inputDigest: string; report: { verdict?: unknown }; intentCheck: unknown } | undefined;
  const transactionPreflight = p
    ? { evidenceId: preflight!.evidenceId, inputDigest: p.inputDigest, verdict: p.report?.verdict ?? null, intentCheck: p.intentCheck }
    : null;

  const s = settled?.body as Record<string, unknown> | undefined;
  const settlement = s
    ? {
        evidenceId: settled!.evidenceId,
        txHash: s.txHash,
        result: s.result,
        reason: s.reason,
        mismatches: s.mismatches,
        confirmations: s.confirmations,
        requiredConfirmations: s.requiredConfirmations,
        // Recorded since these fields existed; absent from older events.
        ...('finality' in s ? { finality: s.finality } : {}),
        ...('minedAt' in s ? { minedAt: s.minedAt } : {}),
        checkedAt: s.checkedAt,
      }
    : null;
  const reconciliation = (s?.result as SettlementResult | undefined) ?? 'NOT_SUBMITTED';

  const limitations: string[] = [LIMITATIONS.unknown, LIMITATIONS.match, LIMITATIONS.nothingExecuted];
  if (reconciliation === 'NOT_SUBMITTED') limitations.push(LIMITATIONS.notSubmitted);
  limitations.push(p ? LIMITATIONS.preflightInput : LIMITATIONS.noPreflight);
  if ((p?.intentCheck as { match?: unknown } | undefined)?.match === false) limitations.push(LIMITATIONS.preflightNotIntent);
  if (decision?.decision === 'HUMAN_APPROVAL' && approval?.status !== 'ADMIN_APPROVED') limitations.push(LIMITATIONS.pendingApproval);
  if (!chain.intent.expectedFrom) limitations.push(LIMITATIONS.anyPayer);

  return {
    evidenceChainId: chain.evidenceChainId,
    intentDigest: chain.intentDigest,
    preAuthorization,
    transactionPreflight,
    settlement,
    reconciliation,
    limitations,
    executionAuthorized: false,
  };
}

const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)']);

export interface IntentCheck {
  kind: 'usdc-transfer' | 'other';
  /**
   * null when the input is not a plain USDC transfer, or when the intent names an expectedFrom
   * and the input no sender: then compare it with the intent yourself
   */
  match: boolean | null;
  mismatches: Array<{ field: 'recipient' | 'amount' | 'expectedFrom'; expected: string; observed: string }>;
}

/**
 * Advisory: does the unsigned input pay the intent, as a plain USDC `transfer` call? Anything
 * else (another contract, native value, a relayed or batched payment) is `other`, match null.
 */
export function checkAgainstIntent(intent: Intent, input: { to: string; from?: string | undefined; valueWei?: string | undefined; data?: string | undefined }): IntentCheck {
  const other: IntentCheck = { kind: 'other', match: null, mismatches: [] };
  if (input.to.toLowerCase() !== USDC_ADDRESS.toLowerCase() || !input.data || (input.valueWei && BigInt(input.valueWei) !== 0n)) return other;
  let args: readonly [string, bigint];
  try {
    // Hex in any case is the same input (its digest is of the lower-case form); viem matches selectors in lower case only.
    const decoded = decodeFunctionData({ abi: transferAbi, data: input.data.toLowerCase() as Hex });
    args = decoded.args;
  } catch {
    return other;
  }
  const mismatches: IntentCheck['mismatches'] = [];
  if (args[0].toLowerCase() !== intent.recipient.toLowerCase()) {
    mismatches.push({ field: 'recipient', expected: getAddress(intent.recipient), observed: getAddress(args[0]) });
  }
  const amount = formatUsdc(args[1]);
  if (amount !== intent.amount) mismatches.push({ field: 'amount', expected: intent.amount, observed: amount });
  if (intent.expectedFrom && input.from && input.from.toLowerCase() !== intent.expectedFrom.toLowerCase()) {
    mismatches.push({ field: 'expectedFrom', expected: getAddress(intent.expectedFrom), observed: getAddress(input.from) });
  }
  // The intent names its payer but the input names no sender: the payer cannot be confirmed.
  const senderUnknown = !!intent.expectedFrom && !input.from;
  return { kind: 'usdc-transfer', match: mismatches.length > 0 ? false : senderUnknown ? null : true, mismatches };
}
