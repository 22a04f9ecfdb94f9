/**
 * Model-based (stateful property-based) test of protected policies, decisions, approvals and
 * evidence-chain creation. fast-check generates sequences of HTTP calls; each answer of the REAL
 * service (driven with inject() and a ManualClock) is compared with a reference model written
 * from the specification, DESIGN.md section 3 and the README (not from src/features/spend-policy).
 *
 * Where the documents leave an answer open, the model accepts each reading it lists (an
 * "ambiguous" outcome, counted and printed at the end) and then follows the one the service chose.
 *
 * Invariants checked on the observed answers, independently of the model's predictions:
 * - per policy and UTC day, the amounts spent (APPROVE at decision time, ADMIN_APPROVED at approval
 *   time) never exceed the dailyBudget in force when each was spent;
 * - a replayed requestId answers the decision first made for it and spends nothing again;
 * - a decision once answered reads back with the same content (nothing lost);
 * - a HUMAN_APPROVAL spends only when approved, and exactly once.
 *
 * CI defaults: a fixed seed, 450 one-instance runs and 150 two-instance runs of up to 40 commands
 * (about 30 s on SQLite, 50 s on PostgreSQL). Longer exploration, e.g.:
 *   MODEL_RUNS=3000 MODEL_TWO_RUNS=1000 MODEL_BURST=9 MODEL_SEED=random MODEL_TIMEOUT_MS=3000000 \
 *     npx vitest run --project sqlite tests/api/decisions-model.test.ts
 * MODEL_COMMANDS (longest sequence), MODEL_BURST (most requests sent at once), MODEL_STATS=1 (print
 * how often each answer and each ambiguous case came up), MODEL_SHRINK=0
 * (report the first failure without shrinking). A failure prints its seed, the shrunk command
 * sequence and the HTTP trace (clock time, request, status, body).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import canonicalize from 'canonicalize';
import { createHash, createPublicKey, verify as edVerify, type KeyObject } from 'node:crypto';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { purgeExpired } from '../../src/features/maintenance.js';
import { ManualClock } from '../../src/platform/clock.js';
import { hashKey } from '../../src/platform/keys.js';
import type { Rules } from '../helpers/policies.js';
import { createTestApp, type TestApp } from '../helpers/app.js';
import { sharedDatabase, type TestDatabase } from '../helpers/db.js';

const NUM_RUNS = Number(process.env.MODEL_RUNS ?? 450);
const MAX_COMMANDS = Number(process.env.MODEL_COMMANDS ?? 40);
const SEED = process.env.MODEL_SEED === 'random' ? undefined : Number(process.env.MODEL_SEED ?? 20260115);
const MAX_BURST = Number(process.env.MODEL_BURST ?? 6);
const TWO_RUNS = Number(process.env.MODEL_TWO_RUNS ?? Math.max(10, Math.floor(NUM_RUNS / 3)));

const POLICIES = '/api/spendpolicy/policies';
const DECISIONS = '/api/spendpolicy/decisions';
const CHAINS = '/api/evidence-chains';
const DAY_MS = 86_400_000;
const RETENTION_MS = 30 * DAY_MS;

// ---------------------------------------------------------------------------------------------
// Value sets: small, so that collisions (same recipient, amount, requestId) are frequent.

/** [as sent, value in micro-USDC] */
const AMOUNTS: Array<[string, bigint]> = [
  ['0', 0n], ['0.0', 0n], ['0.000000', 0n],
  ['0.000001', 1n],
  ['1', 1_000_000n], ['1.0', 1_000_000n], ['1.000000', 1_000_000n],
  ['1.5', 1_500_000n], ['1.50', 1_500_000n],
  ['10', 10_000_000n], ['10.00', 10_000_000n],
  ['20', 20_000_000n], ['20.0', 20_000_000n],
  ['20.000001', 20_000_001n],
  ['50', 50_000_000n], ['50.000000', 50_000_000n],
];
/** Three addresses, each in the spellings it can take (lower, EIP-55 mixed, upper hex). */
const RECIPIENTS: string[][] = [
  ['0xabcdef0123456789abcdef0123456789abcdef01', '0xabCDeF0123456789AbcdEf0123456789aBCDEF01', '0xABCDEF0123456789ABCDEF0123456789ABCDEF01'],
  ['0x00000000000000000000000000000000000000aa', '0x00000000000000000000000000000000000000AA', '0x00000000000000000000000000000000000000AA'],
  ['0x2222222222222222222222222222222222222222'],
];
const FROMS = ['0x70997970c51812dc3a010c7d01b50e0d17dc79c8', '0x70997970C51812dc3A010C7d01b50e0d17dc79C8', '0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc'];
const REQUEST_IDS = ['r0', 'r1', 'r2', 'r3', 'r4', 'R1', 'r5', 'r6', 'r7', 'r8', 'r9', 'r10'];
const AGENT_IDS = ['agent-a', 'agent-b'];
const STARTS = ['2026-01-15T12:00:00.000Z', '2026-01-15T23:59:00.000Z', '2026-01-15T23:30:00.000Z', '2026-02-28T00:00:00.000Z'];

const MAX_PER_TX = ['1', '10', '20', '50', '20.000001', '100'];
const DAILY = ['1', '10', '20', '20.5', '30', '50', '100'];
const HUMAN = ['0', '1', '10', '20', '50'];

function micro(s: string): bigint {
  const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(s);
  if (!m) throw new Error(`not an amount: ${s}`);
  return BigInt(m[1]!) * 1_000_000n + BigInt((m[2] ?? '').padEnd(6, '0'));
}
const lower = (a: string) => a.toLowerCase();
const iso = (ms: number) => new Date(ms).toISOString();
const dayOf = (ms: number) => iso(ms).slice(0, 10);

// ---------------------------------------------------------------------------------------------
// Model

type Status = 'active' | 'inactive';

interface MPolicy {
  idx: number;
  policyId: string;
  agentId: string;
  adminKey: string;
  agentKey: string;
  oldAgentKeys: string[];
  rules: Rules;
  revision: number;
  status: Status;
  agentStatus: Status;
  directChecks: boolean;
  createdAt: number;
  accessExpiresAt: number;
  /** requestId -> decisionId */
  requests: Record<string, string>;
  /** Every spend: APPROVE at decision time, ADMIN_APPROVED at approval time. */
  spends: Array<{ day: string; amount: bigint; recipient: string; decisionId: string }>;
  decisionIds: string[];
}

interface MDecision {
  decisionId: string;
  policyIdx: number;
  requestId: string;
  agentId: string;
  recipient: string; // lower case
  amount: bigint;
  policyRevision: number;
  decision: 'APPROVE' | 'BLOCK' | 'HUMAN_APPROVAL';
  reasons: string[];
  createdAt: number;
  approval: null | { status: 'PENDING' | 'ADMIN_APPROVED'; expiresAt: number; approvedAt: number | null };
  chain: null | { evidenceChainId: string; intentDigest: string; expectedFrom: string | null };
  /** The decision as first answered, without approval: it must never change. */
  first: Record<string, unknown>;
}

interface State {
  now: number;
  policies: MPolicy[];
  decisions: Record<string, MDecision>;
}

interface Model {
  s: State;
}

const BLOCK_REASONS = new Set(['exceeds_max_per_transaction', 'exceeds_daily_budget', 'recipient_not_allowed', 'repeat_limit_reached']);

function spentOn(p: MPolicy, day: string): bigint {
  return p.spends.filter((x) => x.day === day).reduce((a, x) => a + x.amount, 0n);
}
function repeatsOn(p: MPolicy, day: string, recipient: string, amount: bigint): number {
  return p.spends.filter((x) => x.day === day && x.recipient === recipient && x.amount === amount).length;
}

/**
 * The policy-rule table of DESIGN.md section 3 (and README "Spend-policy rules"), in table order.
 * Returns every admissible answer: normally one; two when an amount of 0 meets a day already
 * spent past a lowered budget (is 0 > a negative remainder? the documents do not say).
 */
function evaluate(p: MPolicy, recipient: string, amount: bigint, now: number): Array<{ decision: MDecision['decision']; reasons: string[]; ambiguous?: string }> {
  const r = p.rules;
  const day = dayOf(now);
  const remaining = micro(r.dailyBudget) - spentOn(p, day);
  const known = r.allowedRecipients.map(lower).includes(recipient);
  const build = (overBudget: boolean) => {
    const reasons: string[] = [];
    if (amount > micro(r.maxPerTransaction)) reasons.push('exceeds_max_per_transaction');
    if (overBudget) reasons.push('exceeds_daily_budget');
    if (!known && r.blockUnknownRecipients) reasons.push('recipient_not_allowed');
    if (repeatsOn(p, day, recipient, amount) >= r.maxRepeats) reasons.push('repeat_limit_reached');
    if (!known && !r.blockUnknownRecipients) reasons.push('recipient_unknown');
    if (amount > micro(r.requireHumanAbove)) reasons.push('above_human_threshold');
    const decision: MDecision['decision'] = reasons.some((x) => BLOCK_REASONS.has(x)) ? 'BLOCK' : reasons.length ? 'HUMAN_APPROVAL' : 'APPROVE';
    return { decision, reasons };
  };
  if (amount === 0n && remaining < 0n) {
    return [
      { ...build(true), ambiguous: 'zero amount on a day spent past a lowered budget: exceeds_daily_budget' },
      { ...build(false), ambiguous: 'zero amount on a day spent past a lowered budget: within budget' },
    ];
  }
  return [build(amount > remaining)];
}

function approvalView(d: MDecision, now: number) {
  if (!d.approval) return null;
  const status = d.approval.status === 'PENDING' && now >= d.approval.expiresAt ? 'EXPIRED' : d.approval.status;
  return { status, expiresAt: iso(d.approval.expiresAt), approvedAt: d.approval.approvedAt === null ? null : iso(d.approval.approvedAt) };
}

/** Compares a decision body with the model; null when it matches. */
function checkDecision(s: State, d: MDecision, body: any): string | null {
  const p = s.policies[d.policyIdx]!;
  if (!body || typeof body !== 'object') return 'no decision object';
  const want: Record<string, unknown> = {
    decisionId: d.decisionId,
    policyId: p.policyId,
    policyRevision: d.policyRevision,
    requestId: d.requestId,
    agentId: d.agentId,
    chain: 'base',
    asset: 'USDC',
    decision: d.decision,
    reasons: d.reasons,
    executionAuthorized: false,
    createdAt: iso(d.createdAt),
    approval: approvalView(d, s.now),
  };
  for (const [k, v] of Object.entries(want)) {
    if (JSON.stringify(body[k]) !== JSON.stringify(v)) return `decision.${k}: model ${JSON.stringify(v)}, service ${JSON.stringify(body[k])}`;
  }
  if (typeof body.recipient !== 'string' || lower(body.recipient) !== d.recipient) return `decision.recipient: model ${d.recipient}, service ${body.recipient}`;
  if (typeof body.amount !== 'string' || micro(body.amount) !== d.amount) return `decision.amount: model ${d.amount} micro, service ${body.amount}`;
  const { approval: _a, ...rest } = body;
  if (Object.keys(d.first).length === 0) d.first = rest; // a chain's decision: its first full view
  if (JSON.stringify(rest) !== JSON.stringify(d.first)) return `decision content changed since first answered: first ${JSON.stringify(d.first)}, now ${JSON.stringify(rest)}`;
  return null;
}

/** The service's receipt keys by kid (from /.well-known/jwks.json). */
const receiptKeys = new Map<string, KeyObject>();

/** The receipt must sign exactly the decision answered beside it (DESIGN.md: digest over RFC 8785 JSON). */
function checkReceipt(subject: unknown, receipt: any): string | null {
  const digest = createHash('sha256').update((canonicalize as unknown as (v: unknown) => string)(subject), 'utf8').digest();
  if (receipt.digest !== `sha256:${digest.toString('hex')}`) return `receipt digest ${receipt.digest} is not that of the decision answered`;
  const key = receiptKeys.get(receipt.keyId);
  if (!key) return `receipt keyId ${receipt.keyId} not in the JWKS`;
  if (!edVerify(null, digest, key, Buffer.from(receipt.signature, 'base64url'))) return 'receipt signature does not verify';
  return null;
}

function checkDecisionAnswer(s: State, d: MDecision, body: any): string | null {
  if (!body || typeof body !== 'object') return 'no body';
  const err = checkDecision(s, d, body.decision);
  if (err) return err;
  if (!body.receipt || body.receipt.subjectId !== d.decisionId) return `receipt.subjectId ${body.receipt?.subjectId} is not ${d.decisionId}`;
  return checkReceipt(body.decision, body.receipt);
}

// ---------------------------------------------------------------------------------------------
// Outcomes and the observed-spend ledger

interface Res {
  status: number;
  body: any;
  raw: string;
}
interface Outcome {
  status: number;
  code?: string;
  check?: (body: any) => string | null;
  apply?: (body: any) => void;
  ambiguous?: string;
}

const ambiguities = new Map<string, number>();
const stats = new Map<string, number>();
function count(label: string) {
  stats.set(label, (stats.get(label) ?? 0) + 1);
}
function noteAmbiguity(label: string) {
  ambiguities.set(label, (ambiguities.get(label) ?? 0) + 1);
}

function matchOutcome(outcomes: Outcome[], res: Res): { ok: true; outcome: Outcome } | { ok: false; why: string } {
  const why: string[] = [];
  for (const o of outcomes) {
    if (o.status !== res.status) {
      why.push(`expected ${o.status}${o.code ? ` ${o.code}` : ''}${o.ambiguous ? ` [${o.ambiguous}]` : ''}`);
      continue;
    }
    if (o.code && res.body?.code !== o.code) {
      why.push(`expected code ${o.code}, got ${res.body?.code}`);
      continue;
    }
    const err = o.check?.(res.body) ?? null;
    if (err) {
      why.push(`status ${o.status} but ${err}`);
      continue;
    }
    return { ok: true, outcome: o };
  }
  return { ok: false, why: why.join('; ') };
}

/** What the service itself answered that spends, kept apart from the model. */
interface Ledger {
  spent: Map<string, bigint>; // policyId|day -> micro
  spentDecisions: Set<string>; // decisionIds that have spent
  answered: Map<string, string>; // policyId|requestId -> decisionId first answered
}

// ---------------------------------------------------------------------------------------------
// The system under test

interface Real {
  apps: TestApp[];
  clock: ManualClock;
  ledger: Ledger;
  log: string[];
  concurrentBudget: Map<string, bigint>;
  /** Set while a clock move sent at once with requests may have landed before or after each. */
  tickPending?: boolean;
}

async function send(app: TestApp, method: 'GET' | 'POST' | 'PUT', url: string, key?: string, payload?: unknown, headers: Record<string, string> = {}): Promise<Res> {
  const res = await app.app.inject({
    method,
    url,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });
  let body: any = null;
  try {
    body = JSON.parse(res.body);
  } catch {
    body = null;
  }
  return { status: res.statusCode, body, raw: res.body };
}

// ---------------------------------------------------------------------------------------------
// Operations. request() fixes what is sent from the state before; expect() says what may come
// back given a state (so that two operations sent at once can be checked in either order).

type KeyKind = 'own' | 'old' | 'other' | 'wrongKind';

interface Prepared {
  inst: number;
  method: 'GET' | 'POST' | 'PUT';
  url: string;
  key?: string;
  payload?: unknown;
  headers?: Record<string, string>;
  expect(s: State): Outcome[];
  /** What was sent, when the operation stands for another. */
  label?: string;
  /** Set when sent at once with other requests. */
  concurrent?: boolean;
  /** Updates the observed ledger and checks the invariants that need no model. */
  observe?(s: State, res: Res, real: Real): void | Promise<void>;
}

interface Op {
  toString(): string;
  prepare(s: State): Prepared | null;
}

function pick<T>(xs: T[], i: number): T {
  return xs[i % xs.length]!;
}

function otherPolicy(s: State, p: MPolicy): MPolicy | undefined {
  return s.policies.find((q) => q.idx !== p.idx);
}

/** 401/404/410 of an endpoint that takes the policy's agent key. */
function agentGate(s: State, p: MPolicy, key: string, code401: string | undefined): Outcome[] | null {
  // The kind of key is judged against the state the request meets (a rotation may have run first).
  const kind: KeyKind = key === p.adminKey ? 'wrongKind' : key === p.agentKey ? 'own' : p.oldAgentKeys.includes(key) ? 'old' : 'other';
  if (kind === 'wrongKind') return [{ status: 401, code: code401 }];
  if (kind === 'old' || kind === 'other') return [{ status: 404 }];
  if (s.now >= p.accessExpiresAt) return [{ status: 410 }];
  return null;
}

function agentKeyFor(s: State, p: MPolicy, kind: KeyKind): { key: string; kind: KeyKind } {
  if (kind === 'wrongKind') return { key: p.adminKey, kind };
  if (kind === 'old') return p.oldAgentKeys.length ? { key: p.oldAgentKeys[p.oldAgentKeys.length - 1]!, kind } : { key: p.agentKey, kind: 'own' };
  if (kind === 'other') {
    const q = otherPolicy(s, p);
    return q ? { key: q.agentKey, kind } : { key: p.agentKey, kind: 'own' };
  }
  return { key: p.agentKey, kind };
}

function adminKeyFor(s: State, p: MPolicy, kind: KeyKind): { key: string; kind: KeyKind } {
  if (kind === 'wrongKind') return { key: p.agentKey, kind };
  if (kind === 'other') {
    const q = otherPolicy(s, p);
    return q ? { key: q.adminKey, kind } : { key: p.adminKey, kind: 'own' };
  }
  return { key: p.adminKey, kind: 'own' };
}

function adminGate(s: State, p: MPolicy, kind: KeyKind): Outcome[] | null {
  if (kind === 'wrongKind') return [{ status: 401, code: 'admin_key_required' }];
  if (kind === 'other') return [{ status: 404 }];
  if (s.now >= p.accessExpiresAt) return [{ status: 410 }];
  return null;
}

const inactive = (p: MPolicy) => p.status !== 'active' || p.agentStatus !== 'active';

function recordSpend(p: MPolicy, d: MDecision, now: number) {
  p.spends.push({ day: dayOf(now), amount: d.amount, recipient: d.recipient, decisionId: d.decisionId });
}

/** Observed: spends by the service's own answers, checked against the budget in force. */
function observeSpend(s: State, real: Real, p: MPolicy, decisionId: string, amount: bigint, what: string, at: number = s.now) {
  const L = real.ledger;
  if (L.spentDecisions.has(decisionId)) throw new Error(`INVARIANT: decision ${decisionId} spent twice (${what})`);
  L.spentDecisions.add(decisionId);
  const k = `${p.policyId}|${dayOf(at)}`;
  const total = (L.spent.get(k) ?? 0n) + amount;
  L.spent.set(k, total);
  // A spend of 0 raises nothing (a budget lowered below what the day already spent is not overspent by it).
  // Sent at once with a PUT, a spend may meet either budget: the larger one bounds it.
  const budget = real.concurrentBudget.get(p.policyId) ?? micro(p.rules.dailyBudget);
  if (amount > 0n && total > budget) {
    throw new Error(`INVARIANT: policy ${p.idx} spent ${total} micro on ${dayOf(at)} > dailyBudget ${p.rules.dailyBudget} (${what})`);
  }
}

async function observeDecisionAnswer(s: State, real: Real, p: MPolicy, requestId: string, amountSent: string, res: Res, what: string) {
  if (res.status !== 200 && res.status !== 201) return;
  const b = res.body;
  const d = b && typeof b.decision === 'object' ? b.decision : b; // a plain decision answer, or a chain's creation answer
  if (!d?.decisionId) return;
  const key = `${p.policyId}|${requestId}`;
  const prev = real.ledger.answered.get(key);
  if (prev && prev !== d.decisionId) throw new Error(`INVARIANT: requestId ${requestId} of policy ${p.idx} answered ${prev} before, now ${d.decisionId} (${what})`);
  if (prev) return; // a replay: spends nothing
  real.ledger.answered.set(key, d.decisionId);
  if (d.decision !== 'APPROVE') return;
  let at = d.createdAt ? Date.parse(d.createdAt) : s.now;
  if (!d.createdAt && real.tickPending) {
    // A chain's answer carries no time: while the clock moved, ask the stored decision when it was made.
    const read = await send(real.apps[0]!, 'GET', `${DECISIONS}/${d.decisionId}`, p.adminKey);
    if (read.status === 200) at = Date.parse(read.body.decision.createdAt);
  }
  observeSpend(s, real, p, d.decisionId, micro(amountSent), what, at);
}

// --- create policy ------------------------------------------------------------------------------

const randomRulesArb: fc.Arbitrary<Rules> = fc.record({
  maxPerTransaction: fc.constantFrom(...MAX_PER_TX),
  dailyBudget: fc.constantFrom(...DAILY),
  requireHumanAbove: fc.constantFrom(...HUMAN),
  maxRepeats: fc.integer({ min: 1, max: 3 }),
  allowedRecipients: fc.subarray(RECIPIENTS.flat(), { maxLength: 3 }),
  blockUnknownRecipients: fc.boolean(),
});
/** Rules under which most spends pass, so that budgets and repeat limits are what decides. */
const lenientRulesArb: fc.Arbitrary<Rules> = fc.record({
  maxPerTransaction: fc.constantFrom('20.000001', '50', '100'),
  dailyBudget: fc.constantFrom('20', '20.5', '30', '50'),
  requireHumanAbove: fc.constantFrom('1', '10', '20', '50'),
  maxRepeats: fc.integer({ min: 1, max: 3 }),
  allowedRecipients: fc.constantFrom(RECIPIENTS.map((r) => r[0]!), RECIPIENTS.map((r) => r.at(-1)!), [RECIPIENTS[0]![1]!, RECIPIENTS[1]![2]!]),
  blockUnknownRecipients: fc.boolean(),
});
const rulesArb: fc.Arbitrary<Rules> = fc.oneof(randomRulesArb, lenientRulesArb);

function policyResourceCheck(p: { agentId: string; rules: Rules; revision: number; status: Status; agentStatus: Status; createdAt: number; accessExpiresAt: number }, body: any): string | null {
  if (!body) return 'no body';
  if (body.revision !== p.revision) return `revision: model ${p.revision}, service ${body.revision}`;
  if (body.status !== p.status) return `status: model ${p.status}, service ${body.status}`;
  if (body.agentStatus !== p.agentStatus) return `agentStatus: model ${p.agentStatus}, service ${body.agentStatus}`;
  if (body.agentId !== p.agentId) return `agentId ${body.agentId}`;
  if (body.createdAt !== iso(p.createdAt)) return `createdAt: model ${iso(p.createdAt)}, service ${body.createdAt}`;
  if (body.accessExpiresAt !== iso(p.accessExpiresAt)) return `accessExpiresAt: model ${iso(p.accessExpiresAt)}, service ${body.accessExpiresAt}`;
  const r = body.policy;
  if (!r) return 'no policy';
  for (const k of ['maxPerTransaction', 'dailyBudget', 'requireHumanAbove'] as const) {
    if (typeof r[k] !== 'string' || micro(r[k]) !== micro(p.rules[k])) return `policy.${k}: model ${p.rules[k]}, service ${r[k]}`;
  }
  if (r.maxRepeats !== p.rules.maxRepeats) return `policy.maxRepeats ${r.maxRepeats}`;
  if (r.blockUnknownRecipients !== p.rules.blockUnknownRecipients) return `policy.blockUnknownRecipients ${r.blockUnknownRecipients}`;
  const a = new Set((r.allowedRecipients as string[]).map(lower));
  const b = new Set(p.rules.allowedRecipients.map(lower));
  if (a.size !== b.size || [...a].some((x) => !b.has(x))) return `policy.allowedRecipients ${JSON.stringify(r.allowedRecipients)}`;
  return null;
}

class CreatePolicy implements Op {
  constructor(readonly inst: number, readonly rules: Rules, readonly agent: number, readonly directChecks: boolean) {}
  toString() {
    return `CreatePolicy(i${this.inst}, ${JSON.stringify(this.rules)}, ${AGENT_IDS[this.agent]}, directChecks=${this.directChecks})`;
  }
  prepare(s: State): Prepared | null {
    if (s.policies.length >= 3) return null;
    const agentId = AGENT_IDS[this.agent]!;
    const rules = this.rules;
    const directChecks = this.directChecks;
    return {
      inst: this.inst,
      method: 'POST',
      url: POLICIES,
      payload: { name: `model ${s.policies.length}`, agentId, policy: rules },
      expect: (st) => [
        {
          status: 201,
          check: (body) => {
            if (typeof body?.adminKey !== 'string' || typeof body?.agentKey !== 'string' || !/^sgp_[0-9a-f]{32}$/.test(body?.policyId)) return 'keys or id missing';
            return policyResourceCheck({ agentId, rules, revision: 1, status: 'active', agentStatus: 'active', createdAt: st.now, accessExpiresAt: st.now + RETENTION_MS }, body);
          },
          apply: (body) => {
            st.policies.push({
              idx: st.policies.length,
              policyId: body.policyId,
              agentId,
              adminKey: body.adminKey,
              agentKey: body.agentKey,
              oldAgentKeys: [],
              rules: structuredClone(rules),
              revision: 1,
              status: 'active',
              agentStatus: 'active',
              directChecks,
              createdAt: st.now,
              accessExpiresAt: st.now + RETENTION_MS,
              requests: {},
              spends: [],
              decisionIds: [],
            });
          },
        },
      ],
    };
  }
}

// --- decide ---------------------------------------------------------------------------------------

class Decide implements Op {
  constructor(
    readonly inst: number,
    readonly policy: number,
    readonly rid: number,
    readonly recipient: [number, number],
    readonly amount: number,
    readonly wrongAgent: boolean,
    readonly keyKind: KeyKind,
  ) {}
  toString() {
    const [r, v] = this.recipient;
    return `Decide(i${this.inst}, p${this.policy}, ${REQUEST_IDS[this.rid]}, ${pick(RECIPIENTS[r]!, v)}, "${AMOUNTS[this.amount]![0]}"${this.wrongAgent ? ', wrong agentId' : ''}, key=${this.keyKind})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    const requestId = REQUEST_IDS[this.rid]!;
    const recipientSent = pick(RECIPIENTS[this.recipient[0]]!, this.recipient[1]);
    const recipient = lower(recipientSent);
    const [amountSent, amount] = AMOUNTS[this.amount]!;
    const agentId = this.wrongAgent ? AGENT_IDS.find((a) => a !== p.agentId)! : p.agentId;
    const { key } = agentKeyFor(s, p, this.keyKind);
    const pidx = p.idx;
    return {
      inst: this.inst,
      method: 'POST',
      url: DECISIONS,
      key,
      payload: { policyId: p.policyId, requestId, agentId, chain: 'base', asset: 'USDC', recipient: recipientSent, amount: amountSent },
      expect: (st) => {
        const P = st.policies[pidx]!;
        const gate = agentGate(st, P, key, 'agent_key_required');
        if (gate) return gate;
        const existingId = P.requests[requestId];
        const inact = inactive(P);
        if (existingId) {
          const d = st.decisions[existingId]!;
          const same = d.agentId === agentId && d.recipient === recipient && d.amount === amount;
          const replay: Outcome = same
            ? { status: 200, check: (b) => checkDecisionAnswer(st, d, b) }
            : { status: 409, code: 'request_id_conflict' };
          // Deactivation stops the agent at once: no replay either (as for evidence chains).
          if (inact) return [{ status: 403, code: 'inactive' }];
          if (agentId !== P.agentId) return [replay, { status: 403, ambiguous: 'used requestId with a foreign agentId: 403' }];
          return [replay];
        }
        if (inact || agentId !== P.agentId) return [{ status: 403 }];
        return evaluate(P, recipient, amount, st.now).map((ev) => ({
          status: 200,
          ambiguous: ev.ambiguous,
          check: (b: any) => {
            const dd = b?.decision;
            if (!dd || typeof dd.decisionId !== 'string') return 'no decision';
            if (st.decisions[dd.decisionId]) return `a new requestId answered the existing decision ${dd.decisionId}`;
            const fake = newDecision(st, P, dd, { requestId, agentId, recipient, amount, ev, chain: null });
            return checkDecisionAnswer(st, fake, b);
          },
          apply: (b: any) => {
            for (const r of ev.reasons) count(`event: decide reason ${r}${ev.decision === 'APPROVE' ? '' : ` (${ev.decision})`}`);
            const d = newDecision(st, P, b.decision, { requestId, agentId, recipient, amount, ev, chain: null });
            addDecision(st, P, d);
          },
        }));
      },
      observe: (st, res, real) => observeDecisionAnswer(st, real, st.policies[pidx]!, requestId, amountSent, res, this.toString()),
    };
  }
}

function newDecision(
  st: State,
  P: MPolicy,
  body: any,
  x: { requestId: string; agentId: string; recipient: string; amount: bigint; ev: { decision: MDecision['decision']; reasons: string[] }; chain: MDecision['chain'] },
): MDecision {
  const { approval: _a, ...first } = body ?? {};
  return {
    decisionId: body.decisionId,
    policyIdx: P.idx,
    requestId: x.requestId,
    agentId: x.agentId,
    recipient: x.recipient,
    amount: x.amount,
    policyRevision: P.revision,
    decision: x.ev.decision,
    reasons: x.ev.reasons,
    createdAt: st.now,
    approval: x.ev.decision === 'HUMAN_APPROVAL' ? { status: 'PENDING', expiresAt: st.now + 3600_000, approvedAt: null } : null,
    chain: x.chain,
    first,
  };
}

function addDecision(st: State, P: MPolicy, d: MDecision) {
  st.decisions[d.decisionId] = d;
  P.requests[d.requestId] = d.decisionId;
  P.decisionIds.push(d.decisionId);
  if (d.decision === 'APPROVE') recordSpend(P, d, st.now);
}

// --- evidence chain creation -------------------------------------------------------------------------

class CreateChain implements Op {
  constructor(
    readonly inst: number,
    readonly policy: number,
    readonly rid: number,
    readonly recipient: [number, number],
    readonly amount: number,
    readonly from: number, // -1: none
    readonly wrongAgent: boolean,
    readonly keyKind: KeyKind,
  ) {}
  toString() {
    const [r, v] = this.recipient;
    return `CreateChain(i${this.inst}, p${this.policy}, ${REQUEST_IDS[this.rid]}, ${pick(RECIPIENTS[r]!, v)}, "${AMOUNTS[this.amount]![0]}", from=${this.from < 0 ? '-' : FROMS[this.from]}${this.wrongAgent ? ', wrong agentId' : ''}, key=${this.keyKind})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    const requestId = REQUEST_IDS[this.rid]!;
    const recipientSent = pick(RECIPIENTS[this.recipient[0]]!, this.recipient[1]);
    const recipient = lower(recipientSent);
    const [amountSent, amount] = AMOUNTS[this.amount]!;
    const expectedFrom = this.from < 0 ? null : lower(FROMS[this.from]!);
    const agentId = this.wrongAgent ? AGENT_IDS.find((a) => a !== p.agentId)! : p.agentId;
    const { key } = agentKeyFor(s, p, this.keyKind);
    const pidx = p.idx;
    const payload: Record<string, unknown> = { policyId: p.policyId, agentId, requestId, chain: 'base', asset: 'USDC', recipient: recipientSent, amount: amountSent };
    if (this.from >= 0) payload.expectedFrom = FROMS[this.from];
    const chainCheck = (st: State, d: MDecision, b: any, replayed: boolean): string | null => {
      if (!b) return 'no body';
      const want = { decisionId: d.decisionId, decision: d.decision, reasons: d.reasons, policyRevision: d.policyRevision, executionAuthorized: false, replayed };
      for (const [k, v] of Object.entries(want)) if (JSON.stringify(b[k]) !== JSON.stringify(v)) return `chain.${k}: model ${JSON.stringify(v)}, service ${JSON.stringify(b[k])}`;
      if (d.chain && (b.evidenceChainId !== d.chain.evidenceChainId || b.intentDigest !== d.chain.intentDigest)) return `replay answered another chain/digest ${b.evidenceChainId} ${b.intentDigest}`;
      if (!/^ec_[0-9a-f]{32}$/.test(b.evidenceChainId)) return `evidenceChainId ${b.evidenceChainId}`;
      if (b.__createdAt && !replayed && b.__createdAt !== iso(st.now)) return `chain decision made at ${b.__createdAt}, model ${iso(st.now)}`;
      return null;
    };
    return {
      inst: this.inst,
      method: 'POST',
      url: CHAINS,
      key,
      payload,
      expect: (st) => {
        const P = st.policies[pidx]!;
        const gate = agentGate(st, P, key, undefined);
        if (gate) return gate;
        const existingId = P.requests[requestId];
        const inact = inactive(P);
        if (existingId) {
          const d = st.decisions[existingId]!;
          let answer: Outcome;
          if (!d.chain) answer = { status: 409, code: 'intent_conflict' };
          else {
            const same = d.agentId === agentId && d.recipient === recipient && d.amount === amount && d.chain.expectedFrom === expectedFrom;
            answer = same ? { status: 200, check: (b) => chainCheck(st, d, b, true) } : { status: 409, code: 'intent_conflict' };
          }
          if (inact) return [{ status: 403, code: 'inactive' }];
          if (agentId !== P.agentId) return [answer, { status: 403, ambiguous: 'chain: used requestId with a foreign agentId: 403' }];
          return [answer];
        }
        if (inact || agentId !== P.agentId) return [{ status: 403 }];
        return evaluate(P, recipient, amount, st.now).map((ev) => ({
          status: 201,
          ambiguous: ev.ambiguous,
          check: (b: any) => {
            if (!b?.decisionId) return 'no decisionId';
            if (st.decisions[b.decisionId]) return `new chain answered existing decision ${b.decisionId}`;
            const fake = newDecision(st, P, { decisionId: b.decisionId }, { requestId, agentId, recipient, amount, ev, chain: null });
            return chainCheck(st, fake, b, false);
          },
          apply: (b: any) => {
            const d = newDecision(st, P, { decisionId: b.decisionId }, {
              requestId, agentId, recipient, amount, ev,
              chain: { evidenceChainId: b.evidenceChainId, intentDigest: b.intentDigest, expectedFrom },
            });
            d.first = {}; // filled in by the first read of the decision
            addDecision(st, P, d);
          },
        }));
      },
      observe: (st, res, real) => observeDecisionAnswer(st, real, st.policies[pidx]!, requestId, amountSent, res, this.toString()),
    };
  }
}

// --- the same content again: a replay (same requestId) or a repeat (new requestId) ----------------

/** Re-sends an earlier decision's content, in another spelling, as a plain decision or a chain. */
class Again implements Op {
  constructor(readonly inst: number, readonly policy: number, readonly decision: number, readonly spelling: number, readonly asChain: boolean, readonly newRid: number | null) {}
  inner(s: State): Op | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    if (!p.decisionIds.length) return null;
    const d = s.decisions[pick(p.decisionIds, this.decision)]!;
    const ridIdx = this.newRid === null ? REQUEST_IDS.indexOf(d.requestId) : this.newRid;
    const rcptIdx = RECIPIENTS.findIndex((r) => r[0] === d.recipient);
    const amounts = AMOUNTS.map((a, i) => [a, i] as const).filter(([a]) => a[1] === d.amount);
    const amountIdx = pick(amounts, this.spelling)[1];
    const fromFirst = d.chain?.expectedFrom ? FROMS.findIndex((f) => lower(f) === d.chain!.expectedFrom) : -1;
    const fromIdx = fromFirst === 0 || fromFirst === 1 ? this.spelling % 2 : fromFirst;
    return this.asChain
      ? new CreateChain(this.inst, p.idx, ridIdx, [rcptIdx, this.spelling], amountIdx, fromIdx, false, 'own')
      : new Decide(this.inst, p.idx, ridIdx, [rcptIdx, this.spelling], amountIdx, false, 'own');
  }
  toString() {
    return `Again(i${this.inst}, p${this.policy}, decision#${this.decision}, spelling ${this.spelling}, ${this.asChain ? 'as chain' : 'as decision'}, ${this.newRid === null ? 'same requestId' : `requestId ${REQUEST_IDS[this.newRid]}`})`;
  }
  prepare(s: State): Prepared | null {
    const op = this.inner(s);
    if (!op) return null;
    const prep = op.prepare(s);
    if (prep) prep.label = String(op);
    return prep;
  }
}

// --- approve --------------------------------------------------------------------------------------

class Approve implements Op {
  constructor(readonly inst: number, readonly policy: number, readonly decision: number, readonly keyKind: KeyKind, readonly withNote: boolean) {}
  toString() {
    return `Approve(i${this.inst}, p${this.policy}, decision#${this.decision}, key=${this.keyKind}${this.withNote ? ', note' : ''})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    if (!p.decisionIds.length) return null;
    // Prefer HUMAN_APPROVAL decisions: index among them first, all decisions otherwise.
    const human = p.decisionIds.filter((id) => s.decisions[id]!.decision === 'HUMAN_APPROVAL');
    const decisionId = this.decision % 4 === 3 || !human.length ? pick(p.decisionIds, this.decision) : pick(human, this.decision);
    const { key, kind } = adminKeyFor(s, p, this.keyKind === 'old' ? 'own' : this.keyKind);
    const pidx = p.idx;
    return {
      inst: this.inst,
      method: 'POST',
      url: `${DECISIONS}/${decisionId}/approve`,
      key,
      payload: this.withNote ? { note: 'checked' } : undefined,
      expect: (st) => {
        const P = st.policies[pidx]!;
        const gate = adminGate(st, P, kind);
        const owner = st.policies.find((q) => q.adminKey === key);
        // A key of another policy whose own access ended: 410, as on every endpoint of its policy.
        if (gate && kind === 'other' && owner && st.now >= owner.accessExpiresAt) return [{ status: 410, code: 'expired' }];
        if (gate) return gate;
        const d = st.decisions[decisionId]!;
        if (d.decision !== 'HUMAN_APPROVAL') return [{ status: 409, code: 'approval_conflict' }];
        const a = d.approval!;
        const expired = st.now >= a.expiresAt;
        if (a.status === 'ADMIN_APPROVED') {
          return expired
            ? [{ status: 409, code: 'approval_conflict', ambiguous: 'approve again after approval and expiry: 409' }, { status: 410, ambiguous: 'approve again after approval and expiry: 410' }]
            : [{ status: 409, code: 'approval_conflict' }];
        }
        const conflicts: string[] = [];
        if (d.policyRevision !== P.revision) conflicts.push('revision');
        if (P.status !== 'active') conflicts.push('status');
        const day = dayOf(st.now);
        const remaining = micro(P.rules.dailyBudget) - spentOn(P, day);
        let zeroAmb = false;
        if (d.amount === 0n && remaining < 0n) zeroAmb = true;
        else if (d.amount > remaining) conflicts.push('budget');
        if (repeatsOn(P, day, d.recipient, d.amount) >= P.rules.maxRepeats) conflicts.push('repeats');
        const ok: Outcome = {
          status: 200,
          check: (b) => {
            const copy: MDecision = { ...d, approval: { ...a, status: 'ADMIN_APPROVED', approvedAt: st.now } };
            return checkDecisionAnswer(st, copy, b);
          },
          apply: () => {
            count(`event: approval 200${dayOf(st.now) !== dayOf(d.createdAt) ? ' on a later day than the decision' : ''}${spentOn(P, day) > 0n ? ' on a day with spends' : ''}${repeatsOn(P, day, d.recipient, d.amount) > 0 ? ' with earlier repeats' : ''}`);
            d.approval = { ...a, status: 'ADMIN_APPROVED', approvedAt: st.now };
            recordSpend(P, d, st.now);
          },
        };
        if (expired) {
          return conflicts.length
            ? [{ status: 410, code: 'approval_expired', ambiguous: `approve expired and conflicting (${conflicts}): 410` }, { status: 409, code: 'approval_conflict', ambiguous: `approve expired and conflicting (${conflicts}): 409` }]
            : [{ status: 410, code: 'approval_expired' }];
        }
        if (conflicts.length) return [{ status: 409, code: 'approval_conflict', apply: () => count(`event: approval 409 (${conflicts})`) }];
        if (zeroAmb && !conflicts.length) return [{ ...ok, ambiguous: 'approve 0 on a day spent past a lowered budget: 200' }, { status: 409, code: 'approval_conflict', ambiguous: 'approve 0 on a day spent past a lowered budget: 409' }];
        if (P.agentStatus !== 'active') return [{ ...ok, ambiguous: 'approve while agentStatus inactive: 200' }, { status: 409, code: 'approval_conflict', ambiguous: 'approve while agentStatus inactive: 409' }];
        return [ok];
      },
      observe: (st, res, real) => {
        if (res.status === 200) {
          const d = st.decisions[decisionId]!;
          const at = res.body?.decision?.approval?.approvedAt ? Date.parse(res.body.decision.approval.approvedAt) : st.now;
          observeSpend(st, real, st.policies[pidx]!, decisionId, d.amount, this.toString(), at);
        }
      },
    };
  }
}

// --- read a decision ------------------------------------------------------------------------------

type ReadKey = 'admin' | 'agent' | 'oldAgent' | 'otherAdmin' | 'otherAgent';
class ReadDecision implements Op {
  constructor(readonly inst: number, readonly policy: number, readonly decision: number, readonly keyKind: ReadKey) {}
  toString() {
    return `ReadDecision(i${this.inst}, p${this.policy}, decision#${this.decision}, key=${this.keyKind})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    if (!p.decisionIds.length) return null;
    const decisionId = pick(p.decisionIds, this.decision);
    const q = otherPolicy(s, p);
    let key = p.adminKey;
    let kind: ReadKey = 'admin';
    if (this.keyKind === 'agent') [key, kind] = [p.agentKey, 'agent'];
    if (this.keyKind === 'oldAgent' && p.oldAgentKeys.length) [key, kind] = [p.oldAgentKeys.at(-1)!, 'oldAgent'];
    if (this.keyKind === 'otherAdmin' && q) [key, kind] = [q.adminKey, 'otherAdmin'];
    if (this.keyKind === 'otherAgent' && q) [key, kind] = [q.agentKey, 'otherAgent'];
    const pidx = p.idx;
    return {
      inst: this.inst,
      method: 'GET',
      url: `${DECISIONS}/${decisionId}`,
      key,
      expect: (st) => {
        const P = st.policies[pidx]!;
        const k: ReadKey = kind === 'agent' && key !== P.agentKey ? 'oldAgent' : kind;
        const out = readExpect(st, P, decisionId, k);
        // A key of another policy whose own access ended: 410, as on every endpoint of its policy
        // (before or after a purge removed the decision).
        const owner = st.policies.find((q) => q.adminKey === key || q.agentKey === key);
        if ((k === 'otherAdmin' || k === 'otherAgent') && owner && st.now >= owner.accessExpiresAt) return [{ status: 410, code: 'expired' }];
        return out;
      },
    };
  }
}

function readExpect(st: State, P: MPolicy, decisionId: string, kind: ReadKey): Outcome[] {
  if (kind === 'oldAgent' || kind === 'otherAdmin' || kind === 'otherAgent') return [{ status: 404 }];
  if (st.now >= P.accessExpiresAt) return [{ status: 410 }];
  const d = st.decisions[decisionId]!;
  const ok: Outcome = {
    status: 200,
    check: (b) => checkDecisionAnswer(st, d, b),
  };
  if (inactive(P)) {
    const label = `read decision (${kind} key) while ${P.status !== 'active' ? 'policy' : 'agent'} inactive`;
    return [{ ...ok, ambiguous: `${label}: 200` }, { status: 403, ambiguous: `${label}: 403` }];
  }
  return [ok];
}

// --- list pending ------------------------------------------------------------------------------------

type ListStatus = 'PENDING' | 'EXPIRED' | 'ADMIN_APPROVED' | 'ALL';
class ListPending implements Op {
  constructor(readonly inst: number, readonly policy: number, readonly limit: number, readonly status: ListStatus = 'PENDING') {}
  toString() {
    return `ListDecisions(i${this.inst}, p${this.policy}, status=${this.status}, limit=${this.limit})`;
  }
  query(cursor?: string) {
    return `${this.status === 'ALL' ? '' : `status=${this.status}&`}limit=${this.limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    const pidx = p.idx;
    return {
      inst: this.inst,
      method: 'GET',
      url: `${POLICIES}/${p.policyId}/decisions?${this.query()}`,
      key: p.adminKey,
      expect: (st) => {
        const P = st.policies[pidx]!;
        if (st.now >= P.accessExpiresAt) return [{ status: 410 }];
        const ok: Outcome = {
          status: 200,
          check: (b) => {
            if (!Array.isArray(b?.items)) return 'no items';
            for (const it of b.items) {
              const d = st.decisions[it.decisionId];
              if (!d) return `lists unknown decision ${it.decisionId}`;
              const err = checkDecision(st, d, it);
              if (err) return `listed ${it.decisionId}: ${err}`;
            }
            return null;
          },
        };
        if (inactive(P)) return [{ ...ok, ambiguous: 'list pending while inactive: 200' }, { status: 403, ambiguous: 'list pending while inactive: 403' }];
        return [ok];
      },
    };
  }
}

/** Walks every page of the pending list and compares the whole with the model. */
async function fullPendingCheck(st: State, real: Real, app: TestApp, P: MPolicy, op: ListPending, first: Res): Promise<string | null> {
  const seen: string[] = [];
  let page = first;
  for (let i = 0; i < 50; i++) {
    seen.push(...page.body.items.map((x: any) => x.decisionId));
    const created = page.body.items.map((x: any) => x.createdAt as string);
    if ([...created].sort().reverse().join() !== created.join()) return `page not newest first: ${created}`;
    if (!page.body.nextCursor) break;
    page = await send(app, 'GET', `${POLICIES}/${P.policyId}/decisions?${op.query(page.body.nextCursor)}`, P.adminKey);
    if (page.status !== 200) return `next page answered ${page.status} ${page.raw}`;
  }
  if (new Set(seen).size !== seen.length) return `duplicates in pages: ${seen}`;
  const want = P.decisionIds.filter((id) => op.status === 'ALL' || approvalView(st.decisions[id]!, st.now)?.status === op.status);
  const a = [...seen].sort().join();
  const b = [...want].sort().join();
  if (a !== b) return `pending list: model ${JSON.stringify(want)}, service ${JSON.stringify(seen)}`;
  void real;
  return null;
}

// --- read an evidence chain and its summary ------------------------------------------------------

class ReadChain implements Op {
  constructor(readonly inst: number, readonly policy: number, readonly chain: number, readonly summary: boolean) {}
  toString() {
    return `ReadChain(i${this.inst}, p${this.policy}, chain#${this.chain}${this.summary ? ', summary' : ''})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    const chains = p.decisionIds.filter((id) => s.decisions[id]!.chain);
    if (!chains.length) return null;
    const decisionId = pick(chains, this.chain);
    const d = s.decisions[decisionId]!;
    const pidx = p.idx;
    const summary = this.summary;
    return {
      inst: this.inst,
      method: 'GET',
      url: `${CHAINS}/${d.chain!.evidenceChainId}${summary ? '/summary' : ''}`,
      key: p.agentKey,
      expect: (st) => {
        const P = st.policies[pidx]!;
        const D = st.decisions[decisionId]!;
        if (st.now >= P.accessExpiresAt) return [{ status: 410 }];
        if (inactive(P)) return [{ status: 403 }];
        return [
          {
            status: 200,
            check: (b) => {
              if (b?.evidenceChainId !== D.chain!.evidenceChainId || b?.intentDigest !== D.chain!.intentDigest) return `chain ids ${b?.evidenceChainId} ${b?.intentDigest}`;
              if (summary) {
                const pre = b.preAuthorization;
                if (!pre || pre.decisionId !== D.decisionId || pre.decision !== D.decision || JSON.stringify(pre.reasons) !== JSON.stringify(D.reasons) || pre.policyRevision !== D.policyRevision) return `summary preAuthorization ${JSON.stringify(pre)}`;
                if (JSON.stringify(pre.approval) !== JSON.stringify(approvalView(D, st.now))) return `summary approval: model ${JSON.stringify(approvalView(D, st.now))}, service ${JSON.stringify(pre.approval)}`;
                return null;
              }
              const it = b.intent;
              if (!it || lower(it.recipient) !== D.recipient || micro(it.amount) !== D.amount || it.requestId !== D.requestId || it.agentId !== D.agentId || (it.expectedFrom ? lower(it.expectedFrom) : null) !== D.chain!.expectedFrom) return `intent ${JSON.stringify(it)}`;
              const ev = b.events?.[0];
              if (ev?.eventType !== 'PRECHECK_COMPLETED') return `first event ${ev?.eventType}`;
              const dec = ev.body?.decision;
              // The recorded event keeps the decision as made (README): PENDING, never the later approval.
              const asMade = D.approval ? { status: 'PENDING', expiresAt: iso(D.approval.expiresAt), approvedAt: null } : null;
              if (dec?.decisionId !== D.decisionId || dec.decision !== D.decision || JSON.stringify(dec.reasons) !== JSON.stringify(D.reasons) || JSON.stringify(dec.approval) !== JSON.stringify(asMade) || dec.createdAt !== iso(D.createdAt)) return `precheck decision ${JSON.stringify(dec)}`;
              return null;
            },
          },
        ];
      },
    };
  }
}

// --- policy read, replace, rotate --------------------------------------------------------------

class GetPolicy implements Op {
  constructor(readonly inst: number, readonly policy: number) {}
  toString() {
    return `GetPolicy(i${this.inst}, p${this.policy})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    const pidx = p.idx;
    return {
      inst: this.inst,
      method: 'GET',
      url: `${POLICIES}/${p.policyId}`,
      key: p.adminKey,
      expect: (st) => {
        const P = st.policies[pidx]!;
        if (st.now >= P.accessExpiresAt) return [{ status: 410 }];
        return [{ status: 200, check: (b) => policyResourceCheck(P, b) ?? (b.adminKey || b.agentKey ? 'shows a key' : null) }];
      },
    };
  }
}

type StatusChange = 'none' | 'policyOff' | 'policyOn' | 'agentOff' | 'agentOn' | 'bothOn';
class PutPolicy implements Op {
  constructor(readonly inst: number, readonly policy: number, readonly rules: Rules | null, readonly ifMatch: 'none' | 'current' | 'stale' | 'bare', readonly change: StatusChange) {}
  toString() {
    return `PutPolicy(i${this.inst}, p${this.policy}, ${this.rules ? JSON.stringify(this.rules) : 'same rules'}, If-Match=${this.ifMatch}, ${this.change})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    const pidx = p.idx;
    const rules = this.rules ?? structuredClone(p.rules);
    const body: Record<string, unknown> = { policy: rules };
    if (this.change === 'policyOff') body.status = 'inactive';
    if (this.change === 'policyOn') body.status = 'active';
    if (this.change === 'agentOff') body.agentStatus = 'inactive';
    if (this.change === 'agentOn') body.agentStatus = 'active';
    if (this.change === 'bothOn') Object.assign(body, { status: 'active', agentStatus: 'active' });
    const headers: Record<string, string> = {};
    if (this.ifMatch === 'current') headers['if-match'] = `"${p.revision}"`;
    if (this.ifMatch === 'bare') headers['if-match'] = `${p.revision}`;
    if (this.ifMatch === 'stale') headers['if-match'] = `"${p.revision + 1}"`;
    const ifMatch = this.ifMatch;
    // "stale" names the next revision: sent at once with another PUT, it may be the current one then.
    const named = ifMatch === 'stale' ? p.revision + 1 : p.revision;
    return {
      inst: this.inst,
      method: 'PUT',
      url: `${POLICIES}/${p.policyId}`,
      key: p.adminKey,
      payload: body,
      headers,
      expect: (st) => {
        const P = st.policies[pidx]!;
        if (st.now >= P.accessExpiresAt) return [{ status: 410 }];
        if (ifMatch !== 'none' && named !== P.revision) return [{ status: 412 }];
        const next = {
          ...P,
          rules: structuredClone(rules),
          revision: P.revision + 1,
          status: (body.status as Status | undefined) ?? P.status,
          agentStatus: (body.agentStatus as Status | undefined) ?? P.agentStatus,
        };
        return [
          {
            status: 200,
            check: (b) => policyResourceCheck(next, b),
            apply: () => {
              P.rules = next.rules;
              P.revision = next.revision;
              P.status = next.status;
              P.agentStatus = next.agentStatus;
            },
          },
        ];
      },
    };
  }
}

class RotateAgentKey implements Op {
  constructor(readonly inst: number, readonly policy: number) {}
  toString() {
    return `RotateAgentKey(i${this.inst}, p${this.policy})`;
  }
  prepare(s: State): Prepared | null {
    if (!s.policies.length) return null;
    const p = pick(s.policies, this.policy);
    const pidx = p.idx;
    const prep: Prepared = {
      inst: this.inst,
      method: 'POST',
      url: `${POLICIES}/${p.policyId}/agent-key`,
      key: p.adminKey,
      expect: (st) => {
        const P = st.policies[pidx]!;
        if (st.now >= P.accessExpiresAt) return [{ status: 410 }];
        const ok: Outcome = {
          status: 200,
          check: (b) => (typeof b?.agentKey === 'string' && b.agentKey !== P.agentKey && b.policyId === P.policyId ? null : `bad rotation answer ${JSON.stringify(b)}`),
          apply: (b) => {
            P.oldAgentKeys.push(P.agentKey);
            P.agentKey = b.agentKey;
          },
        };
        // README: two rotations that overlap: one answers the key in force, the other 409.
        const overlap: Outcome[] = prep.concurrent ? [{ status: 409, code: 'conflict' }] : [];
        if (inactive(P)) return [{ ...ok, ambiguous: 'rotate while inactive: 200' }, { status: 403, ambiguous: 'rotate while inactive: 403' }, ...overlap];
        return [ok, ...overlap];
      },
    };
    return prep;
  }
}

// --- clock ---------------------------------------------------------------------------------------

type Tick = 'sec' | 'min59' | 'half' | 'beforeMidnight' | 'midnight' | 'ttlExact' | 'ttlPlus' | 'ttlMinus' | 'accessMinus' | 'accessExact' | 'days31';
class Advance {
  constructor(readonly tick: Tick, readonly policy: number) {}
  toString() {
    return `Advance(${this.tick}${this.tick.startsWith('access') ? ` p${this.policy}` : ''})`;
  }
  target(s: State): number {
    const now = s.now;
    const midnight = Date.parse(`${dayOf(now)}T00:00:00.000Z`) + DAY_MS;
    const lastPending = Object.values(s.decisions).filter((d) => d.approval).map((d) => d.approval!.expiresAt).sort((a, b) => b - a)[0];
    switch (this.tick) {
      case 'sec': return now + 1000;
      case 'min59': return now + 59_000;
      case 'half': return now + 30 * 60_000;
      case 'beforeMidnight': return midnight - 1;
      case 'midnight': return midnight;
      case 'ttlExact': return lastPending && lastPending > now ? lastPending : now + 3600_000;
      case 'ttlMinus': return lastPending && lastPending - 1 > now ? lastPending - 1 : now + 3599_999;
      case 'ttlPlus': return now + 3600_001;
      case 'accessMinus':
      case 'accessExact': {
        if (!s.policies.length) return now;
        const at = pick(s.policies, this.policy).accessExpiresAt - (this.tick === 'accessMinus' ? 1 : 0);
        return Math.max(now, at);
      }
      case 'days31': return now + 31 * DAY_MS;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Running operations

function fail(real: Real, msg: string): never {
  throw new Error(`${msg}\n--- trace (newest last) ---\n${real.log.slice(-60).join('\n')}`);
}

async function runPrepared(model: Model, real: Real, op: Op, prep: Prepared) {
  const app = pick(real.apps, prep.inst);
  const res = await send(app, prep.method, prep.url, prep.key, prep.payload, prep.headers);
  real.log.push(`${iso(model.s.now)} ${op}${prep.label ? ` = ${prep.label}` : ''} -> ${res.status} ${res.raw.slice(0, 300)}`);
  count(`${op.constructor.name} ${res.status}${res.body?.code ? ` ${res.body.code}` : ''}${res.body?.decision?.decision ? ` ${res.body.decision.decision}` : typeof res.body?.decision === 'string' ? ` ${res.body.decision}` : ''}`);
  if (res.status >= 500) fail(real, `server error ${res.status}: ${res.raw}`);
  try {
    await prep.observe?.(model.s, res, real);
  } catch (e) {
    fail(real, (e as Error).message);
  }
  const outcomes = prep.expect(model.s);
  const m = matchOutcome(outcomes, res);
  if (!m.ok) fail(real, `MISMATCH on ${op} at ${iso(model.s.now)}: ${m.why}\nservice: ${res.status} ${res.raw}`);
  if (m.outcome.ambiguous) noteAmbiguity(m.outcome.ambiguous);
  m.outcome.apply?.(res.body);
  if (op instanceof ListPending && res.status === 200) {
    const P = pick(model.s.policies, op.policy);
    const err = await fullPendingCheck(model.s, real, app, P, op, res);
    if (err) fail(real, `MISMATCH on ${op}: ${err}`);
  }
}

/** The retention purge (hourly in the service, `paywarden purge` for the operator). */
class Purge {
  toString() {
    return 'Purge()';
  }
}

class Cmd implements fc.AsyncCommand<Model, Real> {
  constructor(readonly op: Op | Advance | Purge) {}
  check() {
    return true;
  }
  async run(model: Model, real: Real) {
    if (this.op instanceof Advance) {
      const to = this.op.target(model.s);
      model.s.now = to;
      real.clock.set(new Date(to));
      real.log.push(`${iso(to)} ${this.op}`);
      return;
    }
    if (this.op instanceof Purge) {
      // Only what is past retention may go; nothing a live policy answers may change (the model says so).
      const r = await purgeExpired(real.apps[0]!.database, real.clock.now());
      real.log.push(`${iso(model.s.now)} Purge() -> ${JSON.stringify(r)}`);
      return;
    }
    const prep = this.op.prepare(model.s);
    if (!prep) return;
    await runPrepared(model, real, this.op, prep);
  }
  toString() {
    return String(this.op);
  }
}

/**
 * Two rotations of one policy's agent key sent at once that both answered 200 ran one after the
 * other, but their answers fit either order; the database tells which key is in force now.
 */
async function settleRotations(s: State, ops: Op[], rs: Res[], real: Real) {
  const rotated = new Map<number, string[]>();
  ops.forEach((op, i) => {
    if (!(op instanceof RotateAgentKey) || rs[i]!.status !== 200) return;
    const P = pick(s.policies, op.policy);
    rotated.set(P.idx, [...(rotated.get(P.idx) ?? []), rs[i]!.body.agentKey as string]);
  });
  for (const [idx, keys] of rotated) {
    if (keys.length < 2) continue;
    const P = s.policies[idx]!;
    const row = await real.apps[0]!.database.db.selectFrom('policies').select('agent_key_hash').where('id', '=', P.policyId).executeTakeFirstOrThrow();
    const inForce = keys.find((k) => hashKey(k) === row.agent_key_hash);
    if (!inForce || inForce === P.agentKey) continue;
    P.oldAgentKeys = [...P.oldAgentKeys.filter((k) => k !== inForce), P.agentKey];
    P.agentKey = inForce;
  }
}

/** Operations sent at once; the answers must fit one of the serial orders. */
class Parallel implements fc.AsyncCommand<Model, Real> {
  constructor(readonly ops: Op[], readonly tick: { to: Tick; delay: number } | null = null) {}
  check() {
    return true;
  }
  async run(model: Model, real: Real) {
    const preps = this.ops.map((o) => o.prepare(model.s));
    if (preps.some((p) => !p)) return;
    const ps = preps as Prepared[];
    for (const p of ps) p.concurrent = true;
    const t1 = this.tick ? new Advance(this.tick.to, 0).target(model.s) : model.s.now;
    const sending = Promise.all(ps.map((p) => send(pick(real.apps, p.inst), p.method, p.url, p.key, p.payload, p.headers)));
    if (this.tick) {
      // Move the clock while the requests are under way (after `delay` turns of the event loop).
      for (let k = 0; k < this.tick.delay; k++) await new Promise((r) => setImmediate(r));
      real.clock.set(new Date(t1));
      real.tickPending = true;
    }
    const rs = await sending;
    if (this.tick) {
      // A chain's answer carries no time: read when its decision was made, so the order can be told.
      for (const [i, r] of rs.entries()) {
        if (!(r.status === 201 && r.body?.decisionId)) continue;
        const p = model.s.policies.find((q) => q.policyId === (ps[i]!.payload as any)?.policyId);
        const read = p ? await send(real.apps[0]!, 'GET', `${DECISIONS}/${r.body.decisionId}`, p.adminKey) : null;
        if (read?.status === 200) r.body.__createdAt = read.body.decision.createdAt;
      }
    }
    for (const [i, r] of rs.entries()) {
      real.log.push(`${iso(model.s.now)} PARALLEL ${this.ops[i]} -> ${r.status} ${r.raw.slice(0, 300)}`);
      count(`|| ${this.ops[i]!.constructor.name} ${r.status}${r.body?.code ? ` ${r.body.code}` : ''}`);
    }
    if (rs.some((r) => r.status >= 500)) fail(real, `server error in parallel: ${rs.map((r) => `${r.status} ${r.raw}`).join(' | ')}`);
    for (const op of this.ops) {
      if (!(op instanceof PutPolicy) || !op.rules) continue;
      const p = pick(model.s.policies, op.policy);
      const was = real.concurrentBudget.get(p.policyId) ?? micro(p.rules.dailyBudget);
      real.concurrentBudget.set(p.policyId, micro(op.rules.dailyBudget) > was ? micro(op.rules.dailyBudget) : was);
    }
    try {
      for (const [i, p] of ps.entries()) await p.observe?.(model.s, rs[i]!, real);
    } catch (e) {
      fail(real, (e as Error).message);
    } finally {
      real.concurrentBudget.clear();
      real.tickPending = false;
    }
    // Depth-first search for a serial order that explains every answer.
    const why: string[] = [];
    const search = (st: State, remaining: number[], taken: Outcome[]): { st: State; taken: Outcome[] } | null => {
      if (!remaining.length) return { st, taken };
      for (const i of remaining) {
        const next = structuredClone(st);
        if (i === -1) {
          // The clock move: every request after it in this order saw the new time.
          next.now = t1;
          const found = search(next, remaining.filter((j) => j !== i), taken);
          if (found) return found;
          continue;
        }
        const m = matchOutcome(ps[i]!.expect(next), rs[i]!);
        if (!m.ok) {
          if (why.length < 12) why.push(`after ${taken.length} ops, op ${i}: ${m.why}`);
          continue;
        }
        m.outcome.apply?.(rs[i]!.body);
        const found = search(next, remaining.filter((j) => j !== i), [...taken, m.outcome]);
        if (found) return found;
      }
      return null;
    };
    const found = search(model.s, [...ps.map((_, i) => i), ...(this.tick ? [-1] : [])], []);
    if (found) {
      for (const o of found.taken) if (o.ambiguous) noteAmbiguity(o.ambiguous);
      model.s = found.st;
      await settleRotations(model.s, this.ops, rs, real);
      if (this.tick) real.log.push(`${iso(t1)} (clock moved during the batch)`);
      return;
    }
    fail(real, `MISMATCH in ${this}: no serial order fits: ${why.join(' | ')}\n${rs.map((r, i) => `op ${i}: ${r.status} ${r.raw}`).join('\n')}`);
  }
  toString() {
    return `Parallel(${this.ops.join(' || ')}${this.tick ? ` || clock ${this.tick.to} after ${this.tick.delay} turns` : ''})`;
  }
}

// ---------------------------------------------------------------------------------------------
// Arbitraries

function commandArbs(instances: number) {
  const inst = fc.integer({ min: 0, max: instances - 1 });
  const pol = fc.integer({ min: 0, max: 2 });
  const rid = fc.integer({ min: 0, max: REQUEST_IDS.length - 1 });
  const rcpt = fc.tuple(fc.integer({ min: 0, max: RECIPIENTS.length - 1 }), fc.integer({ min: 0, max: 2 }));
  const amt = fc.integer({ min: 0, max: AMOUNTS.length - 1 });
  const agentKey = fc.oneof({ weight: 12, arbitrary: fc.constant<KeyKind>('own') }, { weight: 1, arbitrary: fc.constantFrom<KeyKind>('old', 'other', 'wrongKind') });
  const wrongAgent = fc.oneof({ weight: 15, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) });
  const decide = fc.tuple(inst, pol, rid, rcpt, amt, wrongAgent, agentKey).map(([i, p, r, c, a, w, k]) => new Decide(i, p, r, c, a, w, k));
  const chain = fc
    .tuple(inst, pol, rid, rcpt, amt, fc.integer({ min: -1, max: FROMS.length - 1 }), wrongAgent, agentKey)
    .map(([i, p, r, c, a, f, w, k]) => new CreateChain(i, p, r, c, a, f, w, k));
  const approve = fc
    .tuple(inst, pol, fc.nat(20), fc.oneof({ weight: 10, arbitrary: fc.constant<KeyKind>('own') }, { weight: 1, arbitrary: fc.constantFrom<KeyKind>('other', 'wrongKind') }), fc.boolean())
    .map(([i, p, d, k, n]) => new Approve(i, p, d, k, n));
  const again = fc
    .tuple(inst, pol, fc.nat(20), fc.nat(5), fc.boolean(), fc.option(rid, { freq: 2 }))
    .map(([i, p, d, sp, c, r]) => new Again(i, p, d, sp, c, r));
  const put = fc
    .tuple(inst, pol, fc.option(rulesArb, { freq: 3 }), fc.constantFrom('none', 'current', 'stale', 'bare'), fc.constantFrom<StatusChange>('none', 'none', 'policyOff', 'policyOn', 'agentOff', 'agentOn', 'bothOn'))
    .map(([i, p, r, m, c]) => new PutPolicy(i, p, r, m as 'none', c));
  const rotate = fc.tuple(inst, pol).map(([i, p]) => new RotateAgentKey(i, p));
  const single = fc.oneof(
    { weight: 2, arbitrary: fc.tuple(inst, rulesArb, fc.integer({ min: 0, max: 1 }), fc.boolean()).map(([i, r, a, dc]) => new Cmd(new CreatePolicy(i, r, a, dc))) },
    { weight: 14, arbitrary: decide.map((o) => new Cmd(o)) },
    { weight: 6, arbitrary: chain.map((o) => new Cmd(o)) },
    { weight: 6, arbitrary: again.map((o) => new Cmd(o)) },
    { weight: 8, arbitrary: approve.map((o) => new Cmd(o)) },
    { weight: 3, arbitrary: put.map((o) => new Cmd(o)) },
    { weight: 1, arbitrary: rotate.map((o) => new Cmd(o)) },
    { weight: 4, arbitrary: fc.tuple(inst, pol, fc.nat(20), fc.constantFrom<ReadKey>('admin', 'agent', 'agent', 'oldAgent', 'otherAdmin', 'otherAgent')).map(([i, p, d, k]) => new Cmd(new ReadDecision(i, p, d, k))) },
    { weight: 2, arbitrary: fc.tuple(inst, pol, fc.integer({ min: 1, max: 3 }), fc.constantFrom<ListStatus>('PENDING', 'PENDING', 'EXPIRED', 'ADMIN_APPROVED', 'ALL')).map(([i, p, l, st]) => new Cmd(new ListPending(i, p, l, st))) },
    { weight: 1, arbitrary: fc.tuple(inst, pol).map(([i, p]) => new Cmd(new GetPolicy(i, p))) },
    { weight: 2, arbitrary: fc.tuple(inst, pol, fc.nat(20), fc.boolean()).map(([i, p, c, sm]) => new Cmd(new ReadChain(i, p, c, sm))) },
    { weight: 1, arbitrary: fc.constant(new Cmd(new Purge())) },
    {
      weight: 6,
      arbitrary: fc
        .tuple(
          fc.oneof(
            { weight: 12, arbitrary: fc.constantFrom<Tick>('sec', 'sec', 'min59', 'half', 'beforeMidnight', 'midnight', 'midnight', 'ttlExact', 'ttlPlus', 'ttlMinus') },
            { weight: 1, arbitrary: fc.constantFrom<Tick>('accessMinus', 'accessExact', 'days31') },
          ),
          pol,
        )
        .map(([t, p]) => new Cmd(new Advance(t, p))),
    },
    {
      weight: 4,
      arbitrary: fc.array(fc.oneof({ weight: 4, arbitrary: decide }, { weight: 2, arbitrary: chain }, { weight: 3, arbitrary: approve }, { weight: 3, arbitrary: again }, { weight: 1, arbitrary: put }, { weight: 1, arbitrary: rotate }), { minLength: 2, maxLength: 3 }).map((ops) => new Parallel(ops)),
    },
    {
      // A burst on one policy: budget and repeat races inside one batch (and across instances).
      weight: 3,
      arbitrary: fc
        .tuple(pol, fc.array(fc.tuple(inst, rid, rcpt, amt, fc.boolean(), fc.oneof(decide, approve)), { minLength: 3, maxLength: MAX_BURST }))
        .map(([p, xs]) => new Parallel(xs.map(([i, r, c, a, asChain, other]) => (other instanceof Approve ? new Approve(i, p, other.decision, 'own', false) : asChain ? new CreateChain(i, p, r, c, a, -1, false, 'own') : new Decide(i, p, r, c, a, false, 'own'))))),
    },
    {
      // Requests under way while the clock passes midnight or an approval's expiry.
      weight: 3,
      arbitrary: fc
        .tuple(
          fc.array(fc.oneof({ weight: 4, arbitrary: decide }, { weight: 2, arbitrary: chain }, { weight: 3, arbitrary: approve }, { weight: 3, arbitrary: again }), { minLength: 1, maxLength: 4 }),
          fc.constantFrom<Tick>('midnight', 'ttlExact', 'accessExact', 'sec'),
          fc.nat(8),
        )
        .map(([ops, to, delay]) => new Parallel(ops, { to, delay })),
    },
    {
      // The same request twice at once (on either instance): one decision, one spend, one approval.
      weight: 3,
      arbitrary: fc.tuple(fc.oneof(decide, chain, approve, rotate, again), inst).map(([op, i]) => new Parallel([op, Object.assign(Object.create(Object.getPrototypeOf(op)), op, { inst: i })])),
    },
  );
  return fc.commands([single], { maxCommands: MAX_COMMANDS, size: 'max' });
}

// ---------------------------------------------------------------------------------------------
// Property

async function runOne(apps: TestApp[], clock: ManualClock, start: string, initial: Array<[Rules, number, boolean]>, cmds: Iterable<fc.AsyncCommand<Model, Real>>) {
  const model: Model = { s: { now: Date.parse(start), policies: [], decisions: {} } };
  const real: Real = { apps, clock, ledger: { spent: new Map(), spentDecisions: new Set(), answered: new Map() }, log: [], concurrentBudget: new Map() };
  clock.set(start);
  for (const app of apps) {
    const jwks = await send(app, 'GET', '/.well-known/jwks.json');
    for (const k of jwks.body.keys) receiptKeys.set(k.kid, createPublicKey({ key: k, format: 'jwk' }));
  }
  for (const [i, [r, a, dc]] of initial.entries()) {
    const op = new CreatePolicy(i, r, a, dc);
    await runPrepared(model, real, op, op.prepare(model.s)!);
  }
  // Direct checks on (the operator's act) for some policies; creation of chains must not depend on it.
  for (const p of model.s.policies) if (p.directChecks) await new PolicyStore(apps[0]!.database).setDirectChecks(p.policyId, true, clock.now());
  await fc.asyncModelRun(() => ({ model, real }), cmds);
  // Final audit: every decision ever answered still reads back the same (nothing lost).
  for (const id of Object.keys(model.s.decisions)) {
    const d = model.s.decisions[id]!;
    const P = model.s.policies[d.policyIdx]!;
    if (model.s.now >= P.accessExpiresAt) continue;
    const res = await send(apps[0]!, 'GET', `${DECISIONS}/${id}`, P.adminKey);
    const m = matchOutcome(readExpect(model.s, P, id, 'admin'), res);
    if (!m.ok) fail(real, `FINAL AUDIT of ${id}: ${m.why}\nservice: ${res.status} ${res.raw}`);
  }
}

function property(apps: () => TestApp[], clock: () => ManualClock, instances: number) {
  return fc.asyncProperty(
    fc.constantFrom(...STARTS),
    fc.array(fc.tuple(rulesArb, fc.integer({ min: 0, max: 1 }), fc.boolean()), { minLength: 2, maxLength: 2 }),
    commandArbs(instances),
    async (start, initial, cmds) => runOne(apps(), clock(), start, initial, cmds),
  );
}

/** With MODEL_STATS=1: how often each answer and each ambiguous case came up. */
function report() {
  if (!process.env.MODEL_STATS) return;
  console.log(`Answers seen:\n${[...stats.entries()].sort().map(([k, v]) => `  ${v}\t${k}`).join('\n')}`);
  if (ambiguities.size) {
    const lines = [...ambiguities.entries()].sort().map(([k, v]) => `  ${v}\t${k}`);
    console.log(`Ambiguous cases and how the service answered them:\n${lines.join('\n')}`);
  }
}

describe('protected decisions against a reference model', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => {
    await t?.close();
    report();
  });

  it(
    'one instance: every answer matches the model, no overspend, no double spend, nothing lost',
    async () => {
      await fc.assert(property(() => [t], () => t.clock, 1), { numRuns: NUM_RUNS, seed: SEED, endOnFailure: process.env.MODEL_SHRINK === '0' });
    },
    Number(process.env.MODEL_TIMEOUT_MS ?? 600_000),
  );
});

describe('two instances sharing one database against the same model', () => {
  let a: TestApp;
  let b: TestApp;
  let shared: TestDatabase;
  const clock = new ManualClock();
  beforeAll(async () => {
    a = await createTestApp({ clock });
    shared = await sharedDatabase(a.database);
    b = await createTestApp({ database: shared, clock });
  });
  afterAll(async () => {
    await b?.close();
    await shared?.close();
    await a?.close();
  });

  it(
    'requests to either instance, some at once: the answers fit the model and the budget holds',
    async () => {
      await fc.assert(property(() => [a, b], () => clock, 2), { numRuns: TWO_RUNS, seed: SEED === undefined ? undefined : SEED + 1, endOnFailure: process.env.MODEL_SHRINK === '0' });
    },
    Number(process.env.MODEL_TIMEOUT_MS ?? 600_000),
  );
});

void expect;
