/**
 * The spend-policy rules of DESIGN.md section 3, as one pure function. The free evaluation
 * feeds it what the caller claims; protected decisions feed it what the database knows.
 */
export const DECISIONS = ['APPROVE', 'BLOCK', 'HUMAN_APPROVAL'] as const;
export type Decision = (typeof DECISIONS)[number];

export const PROOF_DECISIONS = ['ALLOW', 'WARN', 'BLOCK', 'INCOMPLETE', 'UNKNOWN'] as const;
export type ProofDecision = (typeof PROOF_DECISIONS)[number];

/** Stable reason codes, in the order they are reported: every BLOCK reason before any human one. */
export const REASONS = [
  'exceeds_max_per_transaction',
  'exceeds_daily_budget',
  'recipient_not_allowed',
  'repeat_limit_reached',
  'proof_blocked',
  'recipient_unknown',
  'above_human_threshold',
  'proof_inconclusive',
] as const;
export type Reason = (typeof REASONS)[number];

const BLOCKING: ReadonlySet<Reason> = new Set([
  'exceeds_max_per_transaction',
  'exceeds_daily_budget',
  'recipient_not_allowed',
  'repeat_limit_reached',
  'proof_blocked',
]);

export interface PolicyRules {
  maxPerTransaction: bigint;
  requireHumanAbove: bigint;
  maxRepeats: number;
  allowedRecipients: readonly string[];
  blockUnknownRecipients: boolean;
}

export interface ProposedSpend {
  recipient: string;
  /** micro-USDC */
  amount: bigint;
}

export interface SpendState {
  /** micro-USDC still spendable in the current window */
  remainingDailyBudget: bigint;
  /** earlier decisions to the same recipient for the same amount in the current window */
  repeatCount: number;
  proofDecision?: ProofDecision | undefined;
}

export interface Evaluation {
  decision: Decision;
  reasons: Reason[];
}

export function evaluatePolicy(rules: PolicyRules, spend: ProposedSpend, state: SpendState): Evaluation {
  const found = new Set<Reason>();
  const recipient = spend.recipient.toLowerCase();
  const known = rules.allowedRecipients.some((a) => a.toLowerCase() === recipient);

  if (spend.amount > rules.maxPerTransaction) found.add('exceeds_max_per_transaction');
  if (spend.amount > state.remainingDailyBudget) found.add('exceeds_daily_budget');
  if (!known && rules.blockUnknownRecipients) found.add('recipient_not_allowed');
  if (state.repeatCount >= rules.maxRepeats) found.add('repeat_limit_reached');
  if (state.proofDecision === 'BLOCK') found.add('proof_blocked');
  if (!known && !rules.blockUnknownRecipients) found.add('recipient_unknown');
  if (spend.amount > rules.requireHumanAbove) found.add('above_human_threshold');
  if (state.proofDecision === 'WARN' || state.proofDecision === 'INCOMPLETE' || state.proofDecision === 'UNKNOWN') {
    found.add('proof_inconclusive');
  }

  const reasons = REASONS.filter((r) => found.has(r));
  const decision: Decision = reasons.some((r) => BLOCKING.has(r))
    ? 'BLOCK'
    : reasons.length > 0
      ? 'HUMAN_APPROVAL'
      : 'APPROVE';
  return { decision, reasons };
}
