import { describe, expect, it } from 'vitest';
import {
  PROOF_DECISIONS,
  evaluatePolicy,
  type Decision,
  type PolicyRules,
  type ProofDecision,
  type ProposedSpend,
  type SpendState,
} from '../../src/features/spend-policy/rules.js';

/**
 * The rule table of DESIGN.md section 3, written out independently of the implementation:
 * rows in table order, each with its outcome and reason code.
 */
const TABLE = [
  { reason: 'exceeds_max_per_transaction', outcome: 'BLOCK' },
  { reason: 'exceeds_daily_budget', outcome: 'BLOCK' },
  { reason: 'recipient_not_allowed', outcome: 'BLOCK' },
  { reason: 'repeat_limit_reached', outcome: 'BLOCK' },
  { reason: 'proof_blocked', outcome: 'BLOCK' },
  { reason: 'recipient_unknown', outcome: 'HUMAN_APPROVAL' },
  { reason: 'above_human_threshold', outcome: 'HUMAN_APPROVAL' },
  { reason: 'proof_inconclusive', outcome: 'HUMAN_APPROVAL' },
] as const;

type Reason = (typeof TABLE)[number]['reason'];

function expectedDecision(reasons: readonly string[]): Decision {
  const outcomes = TABLE.filter((row) => reasons.includes(row.reason)).map((row) => row.outcome);
  if (outcomes.includes('BLOCK')) return 'BLOCK';
  if (outcomes.includes('HUMAN_APPROVAL')) return 'HUMAN_APPROVAL';
  return 'APPROVE';
}

const RECIPIENT = '0xabcdef0123456789abcdef0123456789abcdef01';
const OTHER = '0x2222222222222222222222222222222222222222';
const AMOUNT = 5_000_000n; // 5 USDC

/** A spend that passes every rule, with every limit exactly at the amount (the boundary is inside). */
function baseline(): { rules: PolicyRules; spend: ProposedSpend; state: SpendState } {
  return {
    rules: {
      maxPerTransaction: AMOUNT,
      requireHumanAbove: AMOUNT,
      maxRepeats: 3,
      allowedRecipients: [OTHER, RECIPIENT],
      blockUnknownRecipients: true,
    },
    spend: { recipient: RECIPIENT, amount: AMOUNT },
    state: { remainingDailyBudget: AMOUNT, repeatCount: 2 },
  };
}

type RecipientCase = 'known' | 'unknown_blocked' | 'unknown_allowed';
type ProofCase = 'none' | ProofDecision;

interface Conditions {
  overMax: boolean;
  overBudget: boolean;
  repeatReached: boolean;
  overHuman: boolean;
  recipient: RecipientCase;
  proof: ProofCase;
}

/** Builds inputs where exactly the given conditions hold, each one micro-USDC or one repeat past its limit. */
function build(c: Conditions) {
  const { rules, spend, state } = baseline();
  if (c.overMax) rules.maxPerTransaction = AMOUNT - 1n;
  if (c.overBudget) state.remainingDailyBudget = AMOUNT - 1n;
  if (c.overHuman) rules.requireHumanAbove = AMOUNT - 1n;
  if (c.repeatReached) state.repeatCount = rules.maxRepeats;
  if (c.recipient !== 'known') {
    rules.allowedRecipients = [OTHER];
    rules.blockUnknownRecipients = c.recipient === 'unknown_blocked';
  } else {
    rules.blockUnknownRecipients = true;
  }
  if (c.proof !== 'none') state.proofDecision = c.proof;
  return { rules, spend, state };
}

/** The reasons the table says apply, in table order. */
function expectedReasons(c: Conditions): Reason[] {
  const applies: Record<Reason, boolean> = {
    exceeds_max_per_transaction: c.overMax,
    exceeds_daily_budget: c.overBudget,
    recipient_not_allowed: c.recipient === 'unknown_blocked',
    repeat_limit_reached: c.repeatReached,
    proof_blocked: c.proof === 'BLOCK',
    recipient_unknown: c.recipient === 'unknown_allowed',
    above_human_threshold: c.overHuman,
    proof_inconclusive: c.proof === 'WARN' || c.proof === 'INCOMPLETE' || c.proof === 'UNKNOWN',
  };
  return TABLE.map((row) => row.reason).filter((r) => applies[r]);
}

function run(c: Conditions) {
  const { rules, spend, state } = build(c);
  return evaluatePolicy(rules, spend, state);
}

const NONE: Conditions = { overMax: false, overBudget: false, repeatReached: false, overHuman: false, recipient: 'known', proof: 'none' };

describe('evaluatePolicy: each rule alone', () => {
  it('approves with an empty reason list when no rule applies', () => {
    expect(run(NONE)).toEqual({ decision: 'APPROVE', reasons: [] });
  });

  it.each<[string, Partial<Conditions>, Decision, Reason]>([
    ['amount > maxPerTransaction', { overMax: true }, 'BLOCK', 'exceeds_max_per_transaction'],
    ['amount > remaining daily budget', { overBudget: true }, 'BLOCK', 'exceeds_daily_budget'],
    ['unknown recipient, blockUnknownRecipients', { recipient: 'unknown_blocked' }, 'BLOCK', 'recipient_not_allowed'],
    ['repeat count >= maxRepeats', { repeatReached: true }, 'BLOCK', 'repeat_limit_reached'],
    ['proofDecision BLOCK', { proof: 'BLOCK' }, 'BLOCK', 'proof_blocked'],
    ['unknown recipient, not blockUnknownRecipients', { recipient: 'unknown_allowed' }, 'HUMAN_APPROVAL', 'recipient_unknown'],
    ['amount > requireHumanAbove', { overHuman: true }, 'HUMAN_APPROVAL', 'above_human_threshold'],
    ['proofDecision WARN', { proof: 'WARN' }, 'HUMAN_APPROVAL', 'proof_inconclusive'],
    ['proofDecision INCOMPLETE', { proof: 'INCOMPLETE' }, 'HUMAN_APPROVAL', 'proof_inconclusive'],
    ['proofDecision UNKNOWN', { proof: 'UNKNOWN' }, 'HUMAN_APPROVAL', 'proof_inconclusive'],
  ])('%s gives %s with exactly that reason', (_name, delta, decision, reason) => {
    expect(run({ ...NONE, ...delta })).toEqual({ decision, reasons: [reason] });
  });

  it('proofDecision ALLOW, or no proof at all, adds nothing', () => {
    expect(run({ ...NONE, proof: 'ALLOW' })).toEqual({ decision: 'APPROVE', reasons: [] });
    const { rules, spend, state } = build(NONE);
    expect(evaluatePolicy(rules, spend, { ...state, proofDecision: undefined })).toEqual({ decision: 'APPROVE', reasons: [] });
  });
});

describe('evaluatePolicy: every combination of conditions', () => {
  // Four yes/no conditions, three recipient situations and every proof decision (plus none).
  const flags = ['overMax', 'overBudget', 'repeatReached', 'overHuman'] as const;
  const recipients: RecipientCase[] = ['known', 'unknown_blocked', 'unknown_allowed'];
  const proofs: ProofCase[] = ['none', ...PROOF_DECISIONS];
  const combos: Conditions[] = [];
  for (let mask = 0; mask < 2 ** flags.length; mask++) {
    for (const recipient of recipients) {
      for (const proof of proofs) {
        const c: Conditions = { ...NONE, recipient, proof };
        flags.forEach((f, i) => {
          c[f] = (mask & (1 << i)) !== 0;
        });
        combos.push(c);
      }
    }
  }

  it('covers every combination of reasons the table allows', () => {
    expect(combos).toHaveLength(16 * 3 * 6);
    const distinct = new Set(combos.map((c) => expectedReasons(c).join(',')));
    // 2^4 flags x 3 recipient outcomes x 3 proof outcomes (blocked, inconclusive, nothing)
    expect(distinct.size).toBe(16 * 3 * 3);
  });

  it.each(combos.map((c) => [JSON.stringify(c), c] as const))('%s', (_name, c) => {
    const reasons = expectedReasons(c);
    expect(run(c)).toEqual({ decision: expectedDecision(reasons), reasons });
  });

  it('BLOCK beats HUMAN_APPROVAL beats APPROVE, and every applying reason is listed', () => {
    const all = run({ overMax: true, overBudget: true, repeatReached: true, overHuman: true, recipient: 'unknown_allowed', proof: 'WARN' });
    expect(all).toEqual({
      decision: 'BLOCK',
      reasons: ['exceeds_max_per_transaction', 'exceeds_daily_budget', 'repeat_limit_reached', 'recipient_unknown', 'above_human_threshold', 'proof_inconclusive'],
    });
    const human = run({ ...NONE, overHuman: true, recipient: 'unknown_allowed', proof: 'INCOMPLETE' });
    expect(human).toEqual({ decision: 'HUMAN_APPROVAL', reasons: ['recipient_unknown', 'above_human_threshold', 'proof_inconclusive'] });
  });
});

describe('evaluatePolicy: boundaries', () => {
  const evalWith = (mutate: (x: ReturnType<typeof baseline>) => void) => {
    const x = baseline();
    mutate(x);
    return evaluatePolicy(x.rules, x.spend, x.state);
  };

  it('an amount equal to maxPerTransaction is within; one micro-USDC more is not', () => {
    expect(evalWith((x) => { x.rules.maxPerTransaction = 5_000_000n; x.spend.amount = 5_000_000n; })).toEqual({ decision: 'APPROVE', reasons: [] });
    expect(evalWith((x) => { x.rules.maxPerTransaction = 5_000_000n; x.spend.amount = 5_000_001n; x.rules.requireHumanAbove = 10_000_000n; x.state.remainingDailyBudget = 10_000_000n; }))
      .toEqual({ decision: 'BLOCK', reasons: ['exceeds_max_per_transaction'] });
  });

  it('an amount equal to the remaining budget is within; one micro-USDC more is not', () => {
    expect(evalWith((x) => { x.state.remainingDailyBudget = 5_000_000n; })).toEqual({ decision: 'APPROVE', reasons: [] });
    expect(evalWith((x) => { x.state.remainingDailyBudget = 4_999_999n; })).toEqual({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
  });

  it('a budget of zero blocks any positive amount but not a zero amount', () => {
    expect(evalWith((x) => { x.state.remainingDailyBudget = 0n; })).toEqual({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    expect(evalWith((x) => { x.state.remainingDailyBudget = 0n; x.spend.amount = 0n; })).toEqual({ decision: 'APPROVE', reasons: [] });
  });

  it('an amount equal to requireHumanAbove needs no human; one micro-USDC more does', () => {
    expect(evalWith((x) => { x.rules.requireHumanAbove = 5_000_000n; })).toEqual({ decision: 'APPROVE', reasons: [] });
    expect(evalWith((x) => { x.rules.requireHumanAbove = 4_999_999n; })).toEqual({ decision: 'HUMAN_APPROVAL', reasons: ['above_human_threshold'] });
  });

  it('repeatCount = maxRepeats - 1 is within; = maxRepeats (or more) is blocked', () => {
    for (const maxRepeats of [1, 2, 3, 100]) {
      expect(evalWith((x) => { x.rules.maxRepeats = maxRepeats; x.state.repeatCount = maxRepeats - 1; })).toEqual({ decision: 'APPROVE', reasons: [] });
      expect(evalWith((x) => { x.rules.maxRepeats = maxRepeats; x.state.repeatCount = maxRepeats; })).toEqual({ decision: 'BLOCK', reasons: ['repeat_limit_reached'] });
      expect(evalWith((x) => { x.rules.maxRepeats = maxRepeats; x.state.repeatCount = maxRepeats + 5; })).toEqual({ decision: 'BLOCK', reasons: ['repeat_limit_reached'] });
    }
  });

  it('maxRepeats 1 means once per window', () => {
    expect(evalWith((x) => { x.rules.maxRepeats = 1; x.state.repeatCount = 0; }).decision).toBe('APPROVE');
    expect(evalWith((x) => { x.rules.maxRepeats = 1; x.state.repeatCount = 1; }).decision).toBe('BLOCK');
  });

  it('works at the largest amount without losing precision', () => {
    const max = 999_999_999_999_999_999n;
    expect(evalWith((x) => { x.spend.amount = max; x.rules.maxPerTransaction = max; x.rules.requireHumanAbove = max; x.state.remainingDailyBudget = max; }))
      .toEqual({ decision: 'APPROVE', reasons: [] });
    expect(evalWith((x) => { x.spend.amount = max; x.rules.maxPerTransaction = max - 1n; x.rules.requireHumanAbove = max; x.state.remainingDailyBudget = max; }))
      .toEqual({ decision: 'BLOCK', reasons: ['exceeds_max_per_transaction'] });
  });
});

describe('evaluatePolicy: recipients', () => {
  const upper = '0xABCDEF0123456789ABCDEF0123456789ABCDEF01';
  const lower = upper.toLowerCase();
  const mixed = '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01';

  it('compares addresses case-insensitively, whichever side is mixed case', () => {
    for (const [listed, proposed] of [[upper, lower], [lower, upper], [mixed, lower], [lower, mixed], [mixed, upper], [upper, mixed]] as const) {
      const x = baseline();
      x.rules.allowedRecipients = [listed];
      x.spend.recipient = proposed;
      expect(evaluatePolicy(x.rules, x.spend, x.state)).toEqual({ decision: 'APPROVE', reasons: [] });
    }
  });

  it('an address differing in one hex digit is a different recipient', () => {
    const x = baseline();
    x.rules.allowedRecipients = [mixed];
    x.spend.recipient = mixed.slice(0, -1) + '2';
    expect(evaluatePolicy(x.rules, x.spend, x.state)).toEqual({ decision: 'BLOCK', reasons: ['recipient_not_allowed'] });
  });

  it('an empty allowedRecipients with blockUnknownRecipients blocks every recipient', () => {
    const x = baseline();
    x.rules.allowedRecipients = [];
    x.rules.blockUnknownRecipients = true;
    expect(evaluatePolicy(x.rules, x.spend, x.state)).toEqual({ decision: 'BLOCK', reasons: ['recipient_not_allowed'] });
  });

  it('an empty allowedRecipients without blockUnknownRecipients sends every recipient to a human', () => {
    const x = baseline();
    x.rules.allowedRecipients = [];
    x.rules.blockUnknownRecipients = false;
    expect(evaluatePolicy(x.rules, x.spend, x.state)).toEqual({ decision: 'HUMAN_APPROVAL', reasons: ['recipient_unknown'] });
  });

  it('a known recipient needs no human whatever blockUnknownRecipients says', () => {
    for (const block of [true, false]) {
      const x = baseline();
      x.rules.blockUnknownRecipients = block;
      expect(evaluatePolicy(x.rules, x.spend, x.state)).toEqual({ decision: 'APPROVE', reasons: [] });
    }
  });

  it('does not modify its inputs', () => {
    const x = baseline();
    x.rules.allowedRecipients = Object.freeze([mixed]);
    const before = JSON.stringify(x, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
    evaluatePolicy(Object.freeze(x.rules), Object.freeze(x.spend), Object.freeze(x.state));
    expect(JSON.stringify(x, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))).toBe(before);
  });
});
