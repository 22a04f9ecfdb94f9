import type { Hash } from 'viem';
import type { Database } from '../../platform/db/database.js';
import { writeTransaction, type Tx } from '../../platform/db/tx.js';
import { AppError } from '../../platform/errors.js';
import { UPSTREAM_DETAIL } from '../../platform/chain.js';
import type { ReceiptSigner } from '../../platform/receipts.js';
import type { PaymentEvidence } from '../reports/payment-proof.js';
import type { ChainEvent, EventType, Intent } from './hashing.js';
import type { AgentKey, EvidenceService } from './service.js';
import { expectedOf, finalResultOf, payingTransfers, planAfterReading, planBeforeReading, reconcileSettlement, type RecordedSettlement, type SettlementObservation } from './settlement.js';
import { storage, type ChainRow, type EvidenceStore } from './store.js';
import { checkAgainstIntent } from './summary.js';

/** The unsigned transaction of a preflight attachment (the paid preflight's request body). */
export interface PreflightInput {
  chain: 'base';
  to: string;
  from?: string | undefined;
  valueWei?: string | undefined;
  data?: string | undefined;
}

/** The transaction preflight, as the direct checks use it. */
export interface PreflightPort {
  run(input: PreflightInput, now: Date): Promise<Record<string, unknown>>;
  /** inputDigest: the digest of `normalise(input)` */
  digest(input: PreflightInput): string;
  normalise(input: PreflightInput): Record<string, unknown>;
}

/** Reads a transaction from Base; throws (AppError upstream_unavailable) when Base cannot be read. */
export type ReadTransaction = (hash: Hash) => Promise<{ evidence: PaymentEvidence; blockNumber: bigint | null; minedAt?: Date | undefined }>;

export interface DirectCheckDeps {
  database: Database;
  service: EvidenceService;
  signer: ReceiptSigner;
  preflight: PreflightPort | undefined;
  readTransaction: ReadTransaction;
  minConfirmations: number;
}

/**
 * Direct checks on a chain (the restricted pilot): they need the agent key and a policy whose
 * directChecks the operator turned on (503 otherwise). Each check reads the outside world
 * first, outside any lock, then appends under the chain's lock after checking again what was
 * recorded meanwhile, so concurrent submissions resolve to one recorded outcome.
 *
 * Preflight and settlement bodies carry a receipt signed over
 * { evidenceChainId, eventType, body without its receipt }: the service's attestation of
 * what it observed, verifiable with /.well-known/jwks.json.
 */
export class DirectChecks {
  constructor(private readonly deps: DirectCheckDeps) {}

  private async open(chainId: string, key: AgentKey, now: Date) {
    const { chain, policy } = await this.deps.service.access(chainId, key, now);
    if (Number(policy.direct_checks) !== 1) {
      throw new AppError('direct_checks_disabled', 'direct pilot checks not enabled for this policy; the service operator turns them on');
    }
    return { chain, intent: JSON.parse(chain.intent) as Intent };
  }

  private sign(chainId: string, eventType: EventType, body: Record<string, unknown>, now: Date) {
    return this.deps.signer.sign(`evidence-${eventType.toLowerCase()}`, chainId, { evidenceChainId: chainId, eventType, body }, now);
  }

  async preflight(chainId: string, input: PreflightInput, key: AgentKey, now: Date) {
    const { chain, intent } = await this.open(chainId, key, now);
    const port = this.deps.preflight;
    if (!port) throw new AppError('direct_checks_disabled', 'the transaction preflight is not available in this build');
    const inputDigest = port.digest(input);
    const { store } = this.deps.service;
    const recorded = await storage(() => store.latest(store.db, chain.id, 'TRANSACTION_PREFLIGHT_COMPLETED'));
    if (recorded) return preflightAnswer(chain.id, sameOrConflict(recorded, inputDigest), true);

    const report = await provider(() => port.run(input, now));
    const body = { inputDigest, input: port.normalise(input), intentCheck: checkAgainstIntent(intent, input), report };
    const receipt = this.sign(chain.id, 'TRANSACTION_PREFLIGHT_COMPLETED', body, now);
    return storage(() =>
      writeTransaction(this.deps.database, async (tx) => {
        const locked = await store.lockChain(tx, chain.id);
        const again = await store.latest(tx, chain.id, 'TRANSACTION_PREFLIGHT_COMPLETED');
        if (again) return preflightAnswer(chain.id, sameOrConflict(again, inputDigest), true);
        const event = await store.append(tx, locked, 'TRANSACTION_PREFLIGHT_COMPLETED', { ...body, receipt }, now);
        return preflightAnswer(chain.id, event, false);
      }),
    );
  }

  async settlement(chainId: string, txHashIn: string, key: AgentKey, now: Date) {
    const { chain, intent } = await this.open(chainId, key, now);
    const txHash = txHashIn.toLowerCase();
    const { store } = this.deps.service;
    const recorded = await storage(() => store.events(store.db, chain.id, 'SETTLEMENT_RECONCILED'));
    const seen = recorded.at(-1);
    const before = planBeforeReading(recordedOf(seen), txHash, ownFinal(recorded, txHash));
    if (before.action === 'replay') return settlementAnswer(chain.id, eventOf(recorded, before.recorded), true);
    if (before.action === 'conflict') throw new AppError('evidence_conflict', before.detail);

    // Base not answering is recorded as UNKNOWN (not verification), never as an error.
    const evidence = await this.deps.readTransaction(txHash as Hash).catch((err: unknown) => {
      if (err instanceof AppError && err.code === 'upstream_unavailable') return null;
      throw err;
    });
    const observation = reconcileSettlement(intent, txHash, evidence, this.deps.minConfirmations, now, new Date(chain.created_at));
    return storage(() =>
      writeTransaction(this.deps.database, async (tx) => {
        const locked = await store.lockChain(tx, chain.id);
        const settledNow = await store.events(tx, chain.id, 'SETTLEMENT_RECONCILED');
        const plan = planAfterReading(recordedOf(settledNow.at(-1)), seen?.evidenceId, observation, ownFinal(settledNow, txHash));
        if (plan.action === 'conflict') throw new AppError('evidence_conflict', plan.detail);
        if (plan.action === 'replay') return settlementAnswer(chain.id, eventOf(settledNow, plan.recorded), true);
        const judged = await claimOrMismatch(store, tx, locked, observation, now);
        const body = judged as unknown as Record<string, unknown>;
        const receipt = this.sign(chain.id, 'SETTLEMENT_RECONCILED', body, now);
        const event = await store.append(tx, locked, 'SETTLEMENT_RECONCILED', { ...body, receipt }, now);
        return settlementAnswer(chain.id, event, false);
      }),
    );
  }
}

/**
 * A MATCH holds only if the paying Transfer is not already the settlement of another chain of
 * the same policy: one payment settles one intent. The first matching Transfer of the
 * transaction that is free (or already this chain's) is claimed. When every one is held by
 * another chain of the policy, a holder that another, free Transfer of the same transaction pays
 * as well moves there (its recorded MATCH names no Transfer), so that every intent the
 * transaction pays is settled whichever chain was reconciled first. Otherwise the answer is
 * MISMATCH (final), naming the holder, which the same agent key can read anyway. Chains of other
 * policies hold their own claims and change nothing here (see claimTransfer).
 */
async function claimOrMismatch(store: EvidenceStore, tx: Tx, chain: ChainRow, o: SettlementObservation, now: Date): Promise<SettlementObservation> {
  if (o.result !== 'MATCH') return o;
  await store.lockClaims(tx, chain.policy_id, o.txHash);
  const held: Array<{ logIndex: number; holder: string }> = [];
  for (const t of payingTransfers(o)) {
    const holder = await store.claimTransfer(tx, chain, o.txHash, t.logIndex, now);
    if (holder === chain.id) return o;
    held.push({ logIndex: t.logIndex, holder });
  }
  // A MATCH has a paying Transfer by construction; should one ever have none, nothing is recorded.
  if (held.length === 0) throw new Error(`settlement MATCH of ${o.txHash} without a paying transfer`);
  for (const { logIndex, holder } of held) {
    const other = await store.chainById(tx, holder);
    if (!other) continue;
    const elsewhere = payingTransfers({ transfers: o.transfers, expected: expectedOf(JSON.parse(other.intent) as Intent) });
    for (const t of elsewhere) {
      if (t.logIndex === logIndex || (await store.claimTransfer(tx, other, o.txHash, t.logIndex, now)) !== other.id) continue;
      if (await store.passClaim(tx, chain.policy_id, o.txHash, logIndex, other.id, chain.id)) return o;
      await store.releaseClaim(tx, chain.policy_id, o.txHash, t.logIndex, other.id);
    }
  }
  return { ...o, result: 'MISMATCH', reason: `this payment is already reconciled as the settlement of evidence chain ${held[0]!.holder}; one payment settles one intent` };
}

function sameOrConflict(recorded: ChainEvent, inputDigest: string): ChainEvent {
  if (recorded.body.inputDigest !== inputDigest) {
    throw new AppError('preflight_conflict', `a different preflight (${String(recorded.body.inputDigest)}) is already attached to this chain`);
  }
  return recorded;
}

function preflightAnswer(evidenceChainId: string, event: ChainEvent, replayed: boolean) {
  const b = event.body as { inputDigest: string; intentCheck: Record<string, unknown>; report: Record<string, unknown> & { verdict?: Record<string, unknown> } };
  return {
    evidenceChainId,
    preflightEvidenceId: event.evidenceId,
    inputDigest: b.inputDigest,
    verdict: b.report.verdict ?? {},
    intentCheck: b.intentCheck,
    preflight: b.report,
    replayed,
    executionAuthorized: false as const,
  };
}

const recordedOf = (e: ChainEvent | undefined): RecordedSettlement | undefined =>
  e && { evidenceId: e.evidenceId, body: e.body as unknown as RecordedSettlement['body'] };
const ownFinal = (events: ChainEvent[], txHash: string) => finalResultOf(events.map((e) => recordedOf(e)!), txHash);
const eventOf = (events: ChainEvent[], r: RecordedSettlement) => events.find((e) => e.evidenceId === r.evidenceId)!;

function settlementAnswer(evidenceChainId: string, event: ChainEvent, replayed: boolean) {
  const b = event.body as unknown as SettlementObservation;
  return {
    evidenceChainId,
    settlementEvidenceId: event.evidenceId,
    txHash: b.txHash,
    result: b.result,
    reason: b.reason,
    mismatches: b.mismatches,
    replayed,
    confirmations: b.confirmations,
    requiredConfirmations: b.requiredConfirmations,
    checkedAt: b.checkedAt,
  };
}

/** A provider the check needs is down: 503 on evidence endpoints (nothing was recorded). */
async function provider<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof AppError) || err.code !== 'upstream_unavailable') throw err;
    const e = new AppError('provider_unavailable', `${UPSTREAM_DETAIL} Nothing was recorded.`);
    e.cause = err.cause;
    throw e;
  }
}
