import { sql } from 'kysely';
import type { Database } from '../../platform/db/database.js';
import type { DecisionsTable } from '../../platform/db/schema.js';
import type { ExpressionBuilder, Insertable, QueryCreator, Selectable } from 'kysely';
import type { DB } from '../../platform/db/schema.js';
import { GroupCommitter } from '../../platform/db/group-commit.js';
import { preparedQuery } from '../../platform/db/prepared.js';
import type { Tx } from '../../platform/db/tx.js';
import { digestOf } from '../../platform/canonical.js';
import { AppError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { formatUsdc, parseUsdc } from '../../platform/money.js';
import type { Receipt, ReceiptSigner } from '../../platform/receipts.js';
import { authorizePolicy, evalRulesOf, loadPolicy, type PolicyRow } from './policies.js';
import type { Decision, DecisionRequest } from './protected-schemas.js';
import { evaluatePolicy, type Reason } from './rules.js';

type DecisionRow = Insertable<DecisionsTable> & Partial<Selectable<DecisionsTable>> & Omit<Selectable<DecisionsTable>, 'seq'>;

export interface DecisionOutcome {
  decision: Decision;
  receipt: Receipt;
  /** true when an identical earlier request was answered from storage and nothing was spent */
  replayed: boolean;
}

export const utcDay = (d: Date) => d.toISOString().slice(0, 10);

/** The approval state as of `now`: a pending request past its expiry reads as EXPIRED. */
function approvalOf(row: Omit<DecisionRow, 'receipt'>, now: Date): Decision['approval'] {
  if (row.decision !== 'HUMAN_APPROVAL' || !row.approval_expires_at) return null;
  const status =
    row.approval_status === 'PENDING' && now.toISOString() >= row.approval_expires_at
      ? 'EXPIRED'
      : (row.approval_status as 'PENDING' | 'ADMIN_APPROVED' | 'EXPIRED');
  return { status, expiresAt: row.approval_expires_at, approvedAt: row.approved_at };
}

export function toDecision(row: Omit<DecisionRow, 'receipt'>, now: Date): Decision {
  return {
    decisionId: row.id,
    policyId: row.policy_id,
    policyRevision: Number(row.policy_revision),
    requestId: row.request_id,
    agentId: row.agent_id,
    chain: 'base',
    asset: 'USDC',
    recipient: row.recipient,
    amount: formatUsdc(BigInt(row.amount_micro)),
    decision: row.decision as Decision['decision'],
    reasons: JSON.parse(row.reasons) as Reason[],
    approval: approvalOf(row, now),
    executionAuthorized: false,
    createdAt: row.created_at,
  };
}

/** What makes two requests with one requestId "the same": everything the caller chose. */
function requestDigest(req: { agentId: string; recipient: string; amount: bigint }): string {
  return digestOf({ agentId: req.agentId, chain: 'base', asset: 'USDC', recipient: req.recipient.toLowerCase(), amount: formatUsdc(req.amount) });
}

/**
 * Protected decisions: the rules of the free evaluation, with the budget and repeat counts
 * taken from running totals under a lock on the policy, so concurrent requests can never
 * spend more than the budget.
 */
export class DecisionService {
  constructor(
    private readonly database: Database,
    private readonly signer: ReceiptSigner,
    private readonly approvalTtlSeconds: number,
  ) {
    this.writes = new GroupCommitter(database);
    this.hot = hotQueries(database);
  }

  private readonly hot: ReturnType<typeof hotQueries>;

  /** Every decision and approval commits through here: one durable commit serves a whole batch. */
  readonly writes: GroupCommitter;

  private receiptFor(decision: Decision, now: Date): Receipt {
    return this.signer.sign('spend-decision', decision.decisionId, decision, now);
  }

  /**
   * A stored decision as of `now`, with a receipt that covers exactly what is shown. The stored
   * receipt covers the stored state; a pending request past its expiry reads as EXPIRED, so it
   * gets a fresh receipt for that state (else the answer's receipt would not verify against it).
   */
  private stored(row: DecisionRow, now: Date): Omit<DecisionOutcome, 'replayed'> {
    const decision = toDecision(row, now);
    if (decision.approval && decision.approval.status !== row.approval_status) {
      return { decision, receipt: this.receiptFor(decision, now) };
    }
    return { decision, receipt: JSON.parse(row.receipt) as Receipt };
  }

  async decide(req: DecisionRequest, key: { kind: 'agent'; hash: string }, now: Date): Promise<DecisionOutcome> {
    return this.writes.run([req.policyId], (tx) => this.decideIn(tx, req, key, now));
  }

  /**
   * `decide` inside the caller's write transaction, so that the caller can store more in the
   * same commit (evidence chains store the chain with its decision). `tx` must come from
   * `this.writes.run` (or writeTransaction); the policy is locked here.
   *
   * The receipt is signed right here, on the event loop, and stored with the decision in one
   * insert. Signing on libuv's thread pool was tried: on a 2-core machine handing a signature to
   * the pool cost the event loop about as much as the signature itself (about 25 µs), and every
   * batch then waited for a pool thread to wake (p99 1.5 to 3.7 ms at half load).
   */
  async decideIn(tx: Tx, req: DecisionRequest, key: { kind: 'agent'; hash: string }, now: Date): Promise<DecisionOutcome> {
    const amount = parseUsdc(req.amount);
    const digest = requestDigest({ agentId: req.agentId, recipient: req.recipient, amount });
    const day = utcDay(now);
    const snap = await this.snapshot(tx, req.policyId, req.requestId, day, req.recipient, amount);
    const policy = authorizePolicy(snap?.policy, key, now);

    if (snap?.existingId) {
      const existing = await tx.selectFrom('decisions').selectAll().where('id', '=', snap.existingId).executeTakeFirstOrThrow();
      if (existing.request_digest !== digest) {
        throw new AppError('request_id_conflict', 'this requestId was already used with different content');
      }
      return { ...this.stored(existing, now), replayed: true };
    }

    if (policy.status !== 'active' || policy.agent_status !== 'active') {
      throw new AppError('inactive', policy.status !== 'active' ? 'the policy is inactive' : 'the agent is inactive');
    }
    if (policy.agent_id !== req.agentId) throw new AppError('agent_mismatch', 'agentId is not the agent this policy is for');

    const { spent, repeats } = snap!;
    const rules = evalRulesOf(policy);
    const remaining = rules.dailyBudget > spent ? rules.dailyBudget - spent : 0n;
    const result = evaluatePolicy(rules, { recipient: req.recipient, amount }, { remainingDailyBudget: remaining, repeatCount: repeats });

    const unsigned: Omit<DecisionRow, 'receipt'> = {
      id: newId('dec'),
      policy_id: policy.id,
      request_id: req.requestId,
      agent_id: req.agentId,
      recipient: req.recipient,
      amount_micro: amount,
      request_digest: digest,
      decision: result.decision,
      reasons: JSON.stringify(result.reasons),
      policy_revision: Number(policy.revision),
      day,
      approval_status: result.decision === 'HUMAN_APPROVAL' ? 'PENDING' : null,
      approval_expires_at:
        result.decision === 'HUMAN_APPROVAL' ? new Date(now.getTime() + this.approvalTtlSeconds * 1000).toISOString() : null,
      approved_at: null,
      approval_note: null,
      created_at: now.toISOString(),
    };
    const decision = toDecision(unsigned, now);
    const receipt = this.receiptFor(decision, now);
    const row: DecisionRow = { ...unsigned, receipt: JSON.stringify(receipt) };
    if (result.decision !== 'APPROVE') await this.hot.insertDecision(tx, row);
    else if (this.hot.insertAndSpend) await this.hot.insertAndSpend(tx, { ...row, recipient_lower: req.recipient.toLowerCase() });
    else {
      await this.hot.insertDecision(tx, row);
      await this.spend(tx, policy.id, day, req.recipient, amount);
    }
    return { decision, receipt, replayed: false };
  }

  /** An administrator approves a pending HUMAN_APPROVAL; the budget is spent now, if it still allows. */
  async approve(decisionId: string, key: { kind: 'admin'; hash: string }, note: string | undefined, now: Date): Promise<DecisionOutcome> {
    const found = await this.database.db.selectFrom('decisions').select('policy_id').where('id', '=', decisionId).executeTakeFirst();
    if (!found) return this.unknownDecision(this.database.db, key, now);
    return this.writes.run([found.policy_id], async (tx) => {
      const policy = authorizePolicy(await loadPolicy(this.database, tx, found.policy_id, true), key, now);
      // Read again under the policy lock: a concurrent approval may have changed it.
      const row = await tx.selectFrom('decisions').selectAll().where('id', '=', decisionId).executeTakeFirstOrThrow();
      const approval = approvalOf(row, now);
      if (row.decision !== 'HUMAN_APPROVAL' || approval?.status === 'ADMIN_APPROVED') {
        throw new AppError('approval_conflict', 'the decision is not waiting for approval');
      }
      if (approval?.status === 'EXPIRED') throw new AppError('approval_expired', 'the approval request expired');
      if (Number(policy.revision) !== Number(row.policy_revision)) {
        throw new AppError('approval_conflict', `the policy changed since the decision (revision ${row.policy_revision} -> ${policy.revision})`);
      }
      if (policy.status !== 'active' || policy.agent_status !== 'active') {
        throw new AppError('approval_conflict', 'the policy or agent is inactive');
      }
      // The limits still bind an approved payment: only the reasons a human may override pass.
      const day = utcDay(now);
      const amount = BigInt(row.amount_micro);
      const { spent, repeats } = await this.totals(tx, policy.id, day, row.recipient, amount);
      const rules = evalRulesOf(policy);
      const remaining = rules.dailyBudget > spent ? rules.dailyBudget - spent : 0n;
      const recheck = evaluatePolicy(rules, { recipient: row.recipient, amount }, { remainingDailyBudget: remaining, repeatCount: repeats });
      if (recheck.decision === 'BLOCK') {
        throw new AppError('approval_conflict', `the policy no longer permits it: ${recheck.reasons.join(', ')}`);
      }

      const updated: DecisionRow = { ...row, approval_status: 'ADMIN_APPROVED', approved_at: now.toISOString(), approval_note: note ?? null };
      const decision = toDecision(updated, now);
      const receipt = this.receiptFor(decision, now);
      const res = await tx
        .updateTable('decisions')
        .set({ approval_status: 'ADMIN_APPROVED', approved_at: updated.approved_at, approval_note: updated.approval_note, receipt: JSON.stringify(receipt) })
        .where('id', '=', decisionId)
        .where('approval_status', '=', 'PENDING')
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) throw new AppError('approval_conflict', 'the decision is not waiting for approval');
      await this.spend(tx, policy.id, day, row.recipient, amount);
      return { decision, receipt, replayed: false };
    });
  }

  /** Reads a decision for a key of its policy (admin or agent). */
  async read(decisionId: string, key: { kind: 'admin' | 'agent'; hash: string }, now: Date): Promise<DecisionOutcome> {
    const row = await this.database.db.selectFrom('decisions').selectAll().where('id', '=', decisionId).executeTakeFirst();
    if (!row) return this.unknownDecision(this.database.db, key, now);
    const policy = await loadPolicy(this.database, this.database.db, row.policy_id);
    if (!policy) throw new AppError('not_found', 'decision or key not found');
    authorizePolicy(policy, key, now);
    return { ...this.stored(row, now), replayed: false };
  }

  /**
   * No such decision. When the key is that of a policy whose access expired, the answer is 410 as
   * on every other endpoint of that policy: purging its data removed the decisions, and a 404
   * would tell the caller that the key or decision is wrong rather than that access ended.
   */
  private async unknownDecision(tx: Tx, key: { kind: 'admin' | 'agent'; hash: string }, now: Date): Promise<never> {
    const expired = await tx
      .selectFrom('policies')
      .select('id')
      .where(key.kind === 'admin' ? 'admin_key_hash' : 'agent_key_hash', '=', key.hash)
      .where('access_expires_at', '<=', now.toISOString())
      .executeTakeFirst();
    if (expired) throw new AppError('expired', 'protected-policy access has expired');
    throw new AppError('not_found', 'decision or key not found');
  }

  /** Newest first, by the decision's sequence number; `cursor` is the last sequence seen. */
  async list(
    policy: PolicyRow,
    filter: { status?: 'PENDING' | 'ADMIN_APPROVED' | 'EXPIRED' | undefined; decision?: string | undefined; limit: number; cursor?: string | undefined },
    now: Date,
  ): Promise<{ items: Decision[]; nextCursor: string | null }> {
    const iso = now.toISOString();
    // `seq > 0` (always true) as literal SQL: it lets the planner use the partial index that
    // orders a policy's decisions (migration 0007).
    let q = this.database.db.selectFrom('decisions').selectAll().where('policy_id', '=', policy.id).where(sql<boolean>`seq > 0`);
    if (filter.decision) q = q.where('decision', '=', filter.decision);
    if (filter.status === 'PENDING') q = q.where('approval_status', '=', 'PENDING').where('approval_expires_at', '>', iso);
    if (filter.status === 'ADMIN_APPROVED') q = q.where('approval_status', '=', 'ADMIN_APPROVED');
    if (filter.status === 'EXPIRED') {
      q = q.where((eb) => eb.or([eb('approval_status', '=', 'EXPIRED'), eb.and([eb('approval_status', '=', 'PENDING'), eb('approval_expires_at', '<=', iso)])]));
    }
    if (filter.cursor) q = q.where('seq', '<', Number(filter.cursor));
    const rows = await q.orderBy('seq', 'desc').limit(filter.limit + 1).execute();
    const page = rows.slice(0, filter.limit);
    const last = page[page.length - 1];
    return {
      items: page.map((r) => toDecision(r, now)),
      nextCursor: rows.length > filter.limit && last ? String(last.seq) : null,
    };
  }

  /**
   * Everything a decision reads, in one round trip: the policy row (locked on PostgreSQL), an
   * earlier decision with the same requestId, and today's running totals.
   */
  private async snapshot(tx: Tx, policyId: string, requestId: string, day: string, recipient: string, amount: bigint) {
    const { rows } = await this.hot.snapshot(tx, { policyId, requestId, day, recipient: recipient.toLowerCase(), amount });
    const row = rows[0];
    if (!row) return undefined;
    const { existing_id, spent_micro, repeat_count, ...policy } = row;
    return {
      policy: policy as PolicyRow,
      existingId: existing_id,
      spent: spent_micro === null ? 0n : BigInt(spent_micro),
      repeats: repeat_count === null ? 0 : Number(repeat_count),
    };
  }

  private async totals(tx: Tx, policyId: string, day: string, recipient: string, amount: bigint): Promise<{ spent: bigint; repeats: number }> {
    const { rows } = await this.hot.totals(tx, { policyId, day, recipient: recipient.toLowerCase(), amount });
    const row = rows[0];
    return {
      spent: row?.spent_micro == null ? 0n : BigInt(row.spent_micro),
      repeats: row?.repeat_count == null ? 0 : Number(row.repeat_count),
    };
  }

  private async spend(tx: Tx, policyId: string, day: string, recipient: string, amount: bigint): Promise<void> {
    const args = { policyId, day, recipient: recipient.toLowerCase(), amount };
    await this.hot.addSpend(tx, args);
    await this.hot.addRepeat(tx, args);
  }
}

const POLICY_COLUMNS = [
  'id', 'name', 'agent_id', 'rules', 'revision', 'status', 'agent_status', 'direct_checks', 'admin_key_hash', 'agent_key_hash',
  'created_at', 'updated_at', 'access_expires_at', 'purged_at',
] as const satisfies ReadonlyArray<keyof PolicyRow>;
/** Fails to compile when a policy column is missing above. */
const everyPolicyColumn: Exclude<keyof PolicyRow, (typeof POLICY_COLUMNS)[number]> extends never ? true : never = true;
void everyPolicyColumn;

const DECISION_COLUMNS = [
  'id', 'policy_id', 'request_id', 'agent_id', 'recipient', 'amount_micro', 'request_digest', 'decision', 'reasons',
  'policy_revision', 'day', 'approval_status', 'approval_expires_at', 'approved_at', 'approval_note', 'created_at', 'receipt',
] as const satisfies ReadonlyArray<keyof DecisionRow>;

/**
 * The queries every decision runs, compiled once (see preparedQuery): building them with Kysely
 * on every request cost more than running them.
 */
function hotQueries(database: Database) {
  const { db } = database;
  type Spend = Record<'policyId' | 'day' | 'recipient' | 'amount', never>;
  /** Adds `amount` to the policy's spend of the day. */
  const addSpendTo = (qc: QueryCreator<DB>, p: Omit<Spend, 'recipient'>) =>
    qc
      .insertInto('policy_day_spend')
      .values({ policy_id: p.policyId, day: p.day, spent_micro: p.amount })
      .onConflict((oc) => oc.columns(['policy_id', 'day']).doUpdateSet({ spent_micro: sql`policy_day_spend.spent_micro + ${p.amount}` }));
  /** Counts one more spend of this amount to this recipient today. */
  const addRepeatTo = (qc: QueryCreator<DB>, p: Spend) =>
    qc
      .insertInto('policy_day_repeats')
      .values({ policy_id: p.policyId, day: p.day, recipient: p.recipient, amount_micro: p.amount, count: 1 })
      .onConflict((oc) => oc.columns(['policy_id', 'day', 'recipient', 'amount_micro']).doUpdateSet({ count: sql`policy_day_repeats.count + 1` }));
  const totalsColumns = (eb: ExpressionBuilder<DB, 'policies'>, p: Record<'policyId' | 'day' | 'recipient' | 'amount', never>) =>
    [
      eb.selectFrom('policy_day_spend').select('spent_micro').where('policy_day_spend.policy_id', '=', p.policyId).where('policy_day_spend.day', '=', p.day).as('spent_micro'),
      eb
        .selectFrom('policy_day_repeats')
        .select('policy_day_repeats.count')
        .where('policy_day_repeats.policy_id', '=', p.policyId)
        .where('policy_day_repeats.day', '=', p.day)
        .where('policy_day_repeats.recipient', '=', p.recipient)
        .where('policy_day_repeats.amount_micro', '=', p.amount)
        .as('repeat_count'),
    ] as const;
  return {
    totals: preparedQuery(['policyId', 'day', 'recipient', 'amount'], (p) =>
      db.selectFrom('policies').select((eb) => totalsColumns(eb, p)).where('policies.id', '=', p.policyId),
    ),
    snapshot: preparedQuery(['policyId', 'requestId', 'day', 'recipient', 'amount'], (p) => {
      const q = db
        .selectFrom('policies')
        // Named columns, not policies.*: this is a prepared statement on PostgreSQL, and a column
        // added by a newer instance during a rolling deploy must not break its cached plan.
        .select(POLICY_COLUMNS.map((c) => `policies.${c}` as const))
        .select((eb) => [
          eb.selectFrom('decisions').select('decisions.id').where('decisions.policy_id', '=', p.policyId).where('decisions.request_id', '=', p.requestId).as('existing_id'),
          ...totalsColumns(eb, p),
        ])
        .where('policies.id', '=', p.policyId);
      return database.dialect === 'postgres' ? q.forUpdate() : q;
    }),
    insertDecision: preparedQuery(DECISION_COLUMNS, (p) => db.insertInto('decisions').values(p)),
    /**
     * PostgreSQL only (SQLite has no data-modifying WITH): the decision and both budget counters
     * in one statement, one round trip instead of three.
     */
    insertAndSpend:
      database.dialect === 'postgres'
        ? preparedQuery([...DECISION_COLUMNS, 'recipient_lower'], (p) => {
            const spend = { policyId: p.policy_id, day: p.day, recipient: p.recipient_lower, amount: p.amount_micro };
            return db
              .with('spend', (qc) => addSpendTo(qc, spend))
              // (the CTE above only widens the creator's table types)
              .with('repeats', (qc) => addRepeatTo(qc as unknown as QueryCreator<DB>, spend))
              .insertInto('decisions')
              .values(Object.fromEntries(DECISION_COLUMNS.map((c) => [c, p[c]])) as Record<(typeof DECISION_COLUMNS)[number], never>);
          })
        : undefined,
    addSpend: preparedQuery(['policyId', 'day', 'amount'], (p) => addSpendTo(db, p)),
    addRepeat: preparedQuery(['policyId', 'day', 'recipient', 'amount'], (p) => addRepeatTo(db, p)),
  };
}
