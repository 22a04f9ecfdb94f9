// Model-based (stateful, property-based) test of the evidence-chain STATE MACHINE, over real
// transactions on the local devnet (anvil as Base, Circle's USDC at the canonical address).
//
// The model is written from the specification ("Evidence chain", "States and transitions",
// "Errors" -> evidence chains), DESIGN.md section 3 ("Evidence chains", "Settlement results") and
// the README's evidence-chain section, before reading src/features/evidence/*. It reuses the
// single-transaction reference model of tests/unit/settlement-model.ts.
//
// Every run: two fresh pilot policies, 3-5 chain slots (intents sharing recipient and amount, so
// that several chains can claim the same transfers), one fresh transfer still in the mempool, and
// a generated sequence of commands: create (identical / cosmetic / changed retry), attach
// preflight (two variants), reconcile settlement with a hash from the pool, read chain and
// summary, mine a block, and batches of concurrent requests split over two service instances
// sharing one database. After every step the observable state (events, summary, the claims
// table) is checked against the model; at the end every chain is audited with verifyChain (the
// logic of `paywarden evidence verify`).
//
// It lives under tests/api (as the other devnet-backed evidence tests there do) so that it runs on
// SQLite and, with TEST_DATABASE_URL set, again on PostgreSQL (vitest.config.ts excludes
// tests/devnet from the postgres project):
//   npx vitest run --project sqlite tests/api/evidence-model.test.ts
//   TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx vitest run --project postgres tests/api/evidence-model.test.ts
// Defaults: 100 generated runs with a fixed seed, after three hand-picked examples (the claims
// race); about 20 s on SQLite and 35 s on PostgreSQL on a 2-core machine. Longer exploration:
//   EVIDENCE_MODEL_RUNS=500 EVIDENCE_MODEL_SEED=<n>   more runs, another seed
//   EVIDENCE_MODEL_EXAMPLES=0                           generated runs only
//   EVIDENCE_MODEL_SHRINK=1                             shrink a failure (slow: every try drives the devnet)
//   EVIDENCE_MODEL_STATS=1 / EVIDENCE_MODEL_VERBOSE=1    counts of answers / every answer in the failure log
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  createPublicClient,
  createTestClient,
  encodeFunctionData,
  http,
  TransactionNotFoundError,
  TransactionReceiptNotFoundError,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import { MULTICALL3_ADDRESS, USDC_ADDRESS, baseDevnetChain, startDevnet, type Devnet } from '../../src/devnet/index.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { verifyChain, type JwksDocument } from '../../src/features/evidence/verify.js';
import { ManualClock } from '../../src/platform/clock.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { sharedDatabase, testDialect, type TestDatabase } from '../helpers/db.js';
import { AGENT, createPolicy, type Created } from '../helpers/policies.js';
import { CHAINS, UNKNOWN_CHAIN_ID, devnetSender, usdcAbi } from './evidence-helpers.js';
import { decodeTransfer, diff, modelSettle, mismatchKey, toMicro, type ModelIntent, type ModelLog, type ModelObservation } from '../unit/settlement-model.js';

const REQUIRED = 2;
const RUNS = Number(process.env.EVIDENCE_MODEL_RUNS ?? 100);
const SEED = Number(process.env.EVIDENCE_MODEL_SEED ?? 20261123);
const VERBOSE = !!process.env.EVIDENCE_MODEL_VERBOSE;


const PAYER = 1;
const R = 2; // the recipient most intents share
const R2 = 3; // another recipient
const POOR = 4; // sends a transfer of more than it holds (reverts)
const S5 = 5; // another sender

let devnet: Devnet;
let a: TestApp;
let b: TestApp;
let shared: TestDatabase;
let clock: ManualClock;
let pub: ReturnType<typeof createPublicClient>;
let test: ReturnType<typeof createTestClient>;
let jwks: JwksDocument;
const addr = (i: number): Address => devnet.accounts[i]!.address;
const lc = (s: string) => s.toLowerCase();

let sender: ReturnType<typeof devnetSender>;
const wallet = (i: number) => sender.wallet(i);
const send = (from: number, to: Address, data: Hex, gas = 300_000n) => sender.send(from, to, data, gas);
const transfer = (to: number, micro: bigint) => sender.transfer(to, micro);
const transferFrom = (from: number, to: number, micro: bigint) => sender.transferFrom(from, to, micro);
const multicall = (calls: Hex[]) => sender.multicall(calls);

// ---------------------------------------------------------------------------------------------
// The pool of real transactions
// ---------------------------------------------------------------------------------------------
const POOL_KEYS = ['early', 'single', 'singleS5', 'double', 'doubleMixed', 'plusOther', 'wrong', 'reverted', 'r2'] as const;
type PoolKey = (typeof POOL_KEYS)[number];
type TxKey = PoolKey | 'fresh' | 'unknown' | 'unknown2';
const pool = {} as Record<PoolKey, Hash>;

/** Intent templates: all but E can be paid by some transfer of the pool. */
type Template = { recipient: number; amount: string; from?: number };
const TEMPLATES: Template[] = [
  { recipient: R, amount: '1.5', from: PAYER }, // A
  { recipient: R, amount: '1.5' }, // B: any sender
  { recipient: R, amount: '1.5', from: S5 }, // C
  { recipient: R2, amount: '2', from: PAYER }, // D
  { recipient: R, amount: '2' }, // E: nothing pays it
];

// ---------------------------------------------------------------------------------------------
// Observation: what Base shows for a hash right now (plus the block time, for the minedAt rule)
// ---------------------------------------------------------------------------------------------
type Obs = ModelObservation & { minedAtMs?: number; logIndexes?: number[] };
async function observe(hash: Hash): Promise<Obs> {
  const head = await pub.getBlockNumber({ cacheTime: 0 });
  const receipt = await pub.getTransactionReceipt({ hash }).catch((e: unknown) => {
    if (e instanceof TransactionReceiptNotFoundError) return null;
    throw e;
  });
  if (!receipt) {
    const tx = await pub.getTransaction({ hash }).catch((e: unknown) => {
      if (e instanceof TransactionNotFoundError) return null;
      throw e;
    });
    return { kind: tx ? 'pending' : 'not-found' };
  }
  const block = await pub.getBlock({ blockNumber: receipt.blockNumber });
  return {
    kind: 'mined',
    status: receipt.status,
    blockNumber: receipt.blockNumber,
    head,
    logs: receipt.logs.map((l) => ({ address: l.address, topics: [...l.topics], data: l.data })),
    logIndexes: receipt.logs.map((l) => l.logIndex),
    minedAtMs: Number(block.timestamp) * 1000,
  };
}

/** The transfers of `obs` that pay `intent` exactly, each as [position in the receipt, block-level logIndex]. */
function payingTransfers(obs: Obs, intent: ModelIntent): Array<[number, number]> {
  if (obs.kind !== 'mined' || obs.status !== 'success') return [];
  const out: Array<[number, number]> = [];
  obs.logs.forEach((log: ModelLog, i: number) => {
    const t = decodeTransfer(log, i);
    if (t && diff(intent, t).length === 0) out.push([i, obs.logIndexes![i]!]);
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------
/** Final for their transaction (the same hash replays); only a MATCH closes the chain to other hashes. */
const FINAL = new Set(['MATCH', 'MISMATCH', 'FAILED']);
interface ChainModel {
  slot: number;
  policy: number;
  id: string;
  intent: ModelIntent;
  body: Record<string, unknown>;
  createdAtMs: number;
  intentDigest: string;
  decisionId?: string;
  nEvents: number;
  preflight: number | null;
  preflightEvidenceId?: string;
  /** last settlement reading */
  settlement: { result: string; txHash: string; evidenceId: string; confirmations?: number } | null;
  /** each transaction's final reading */
  finals: Map<string, { result: string; evidenceId: string }>;
  /** for a MATCH: the transfers of its transaction that pay it (positions in the receipt) */
  candidates?: Array<[number, number]>;
  events?: unknown[]; // last read, for the append-only check
}
interface State {
  chains: Record<number, ChainModel>;
}
interface RunCtx {
  policies: Created[];
  slots: Array<{ tpl: number; policy: number }>;
  requestIds: string[];
  hashes: Record<TxKey, Hash>;
  log: string[];
}

type Cmd =
  | { k: 'create'; slot: number; variant: 'same' | 'cosmetic' | 'changed' | 'otherAgent'; inst: number }
  | { k: 'preflight'; slot: number; v: number; inst: number }
  | { k: 'settle'; slot: number; tx: TxKey; inst: number; upper?: boolean }
  | { k: 'read'; slot: number; inst: number }
  | { k: 'mine' }
  | { k: 'batch'; items: Array<Extract<Cmd, { k: 'create' | 'preflight' | 'settle' }>> };

const app = (inst: number) => (inst ? b : a);
const auth = (key: string) => ({ authorization: `Bearer ${key}` });

function intentOf(ctx: RunCtx, slot: number): ModelIntent {
  const tpl = TEMPLATES[ctx.slots[slot]!.tpl]!;
  return { recipient: addr(tpl.recipient), amount: tpl.amount, ...(tpl.from !== undefined ? { expectedFrom: addr(tpl.from) } : {}) };
}
function bodyOf(ctx: RunCtx, slot: number, variant: 'same' | 'cosmetic' | 'changed' | 'otherAgent'): Record<string, unknown> {
  const intent = intentOf(ctx, slot);
  const base: Record<string, unknown> = {
    policyId: ctx.policies[ctx.slots[slot]!.policy]!.policyId,
    agentId: AGENT,
    requestId: ctx.requestIds[slot],
    chain: 'base',
    asset: 'USDC',
    recipient: intent.recipient,
    amount: intent.amount,
    ...(intent.expectedFrom ? { expectedFrom: intent.expectedFrom } : {}),
  };
  // the same intent in other clothes: upper-case hex, trailing zeros of the amount
  if (variant === 'cosmetic')
    return {
      ...base,
      recipient: `0x${intent.recipient.slice(2).toUpperCase()}`,
      amount: `${intent.amount}${intent.amount.includes('.') ? '00' : '.000'}`,
      ...(intent.expectedFrom ? { expectedFrom: intent.expectedFrom.toLowerCase() } : {}),
    };
  if (variant === 'otherAgent') return { ...base, agentId: 'agent-8' };
  if (variant === 'changed') return { ...base, amount: intent.amount === '1.5' ? '1.6' : '2.1' };
  return base;
}
function preflightBody(intent: ModelIntent, v: number) {
  const micro = toMicro(intent.amount) + BigInt(v); // v 1: one micro-USDC more
  return { chain: 'base', to: USDC_ADDRESS, from: addr(PAYER), data: encodeFunctionData({ abi: usdcAbi, functionName: 'transfer', args: [intent.recipient as Address, micro] }) };
}

type Res = { statusCode: number; body: string };
const code = (res: Res) => {
  try {
    return JSON.parse(res.body).code as string;
  } catch {
    return undefined;
  }
};

/** Bipartite: can every chain in `wants` (candidate lists) get a distinct transfer? */
function assignable(wants: number[][]): boolean {
  const used = new Set<number>();
  const go = (i: number): boolean => {
    if (i === wants.length) return true;
    for (const t of wants[i]!) {
      if (used.has(t)) continue;
      used.add(t);
      if (go(i + 1)) return true;
      used.delete(t);
    }
    return false;
  };
  return go(0);
}

class ModelError extends Error {}
function fail(msg: string): never {
  throw new ModelError(msg);
}

/**
 * Applies one request's answer to the model: throws a ModelError when the answer is not one the
 * documents allow in state `s`. `concurrent` lists the other requests of its batch.
 */
function apply(s: State, ctx: RunCtx, c: Extract<Cmd, { k: 'create' | 'preflight' | 'settle' }>, res: Res, obs: Map<string, Obs>, concurrent: Cmd[] = []): void {
  const ch = s.chains[c.slot];
  const tag = `${c.k}(slot ${c.slot}${c.k === 'settle' ? `, ${c.tx}` : ''}${c.k === 'create' ? `, ${c.variant}` : ''}${c.k === 'preflight' ? `, v${c.v}` : ''})`;
  const body = res.statusCode < 500 ? json(res) : {};
  if (c.k === 'create') {
    if (c.variant === 'otherAgent') {
      // README: "403 policy or agent inactive (or an intent for another agent)"
      // (ambiguity: with a chain already under that requestId the service answers 409 intent_conflict first)
      const ok = (res.statusCode === 403 && code(res) === 'agent_mismatch') || (ch && res.statusCode === 409 && code(res) === 'intent_conflict');
      if (!ok) fail(`${tag}: an intent for another agent answered ${res.statusCode} ${res.body}`);
      return;
    }
    if (!ch) {
      if (c.variant === 'changed') fail(`${tag}: a changed variant is never sent to a new slot`);
      if (res.statusCode !== 201) fail(`${tag}: new intent answered ${res.statusCode} ${res.body}`);
      if (body.replayed !== false || body.decision !== 'APPROVE' || body.executionAuthorized !== false) fail(`${tag}: creation answer ${res.body}`);
      s.chains[c.slot] = {
        slot: c.slot,
        policy: ctx.slots[c.slot]!.policy,
        id: body.evidenceChainId,
        intent: intentOf(ctx, c.slot),
        body: bodyOf(ctx, c.slot, 'same'),
        createdAtMs: clock.now().getTime(),
        intentDigest: body.intentDigest,
        decisionId: body.decisionId,
        nEvents: 1,
        preflight: null,
        settlement: null,
        finals: new Map(),
      };
      return;
    }
    if (c.variant === 'changed') {
      if (res.statusCode !== 409 || code(res) !== 'intent_conflict') fail(`${tag}: changed intent answered ${res.statusCode} ${res.body}`);
      return;
    }
    if (res.statusCode !== 200) fail(`${tag}: identical retry answered ${res.statusCode} ${res.body}`);
    if (body.replayed !== true || body.evidenceChainId !== ch.id || body.intentDigest !== ch.intentDigest || body.decision !== 'APPROVE') fail(`${tag}: retry answer ${res.body}`);
    return;
  }
  if (!ch) fail(`${tag}: no chain`);
  if (c.k === 'preflight') {
    if (ch.preflight === null) {
      if (res.statusCode !== 200 || body.replayed !== false) fail(`${tag}: first preflight answered ${res.statusCode} ${res.body}`);
      ch.preflight = c.v;
      ch.preflightEvidenceId = body.preflightEvidenceId;
      ch.nEvents += 1;
    } else if (ch.preflight === c.v) {
      if (res.statusCode !== 200 || body.replayed !== true || body.preflightEvidenceId !== ch.preflightEvidenceId) fail(`${tag}: same preflight again answered ${res.statusCode} ${res.body}`);
    } else if (res.statusCode !== 409 || code(res) !== 'preflight_conflict') fail(`${tag}: a different preflight answered ${res.statusCode} ${res.body}`);
    return;
  }
  // settlement
  const hash = ctx.hashes[c.tx];
  const o = obs.get(hash)!;
  const sameChainRacing = concurrent.some((x) => x !== c && (x.k === 'settle' || x.k === 'preflight') && x.slot === c.slot);
  if (res.statusCode === 409) {
    if (code(res) !== 'evidence_conflict') fail(`${tag}: 409 with code ${code(res)}`);
    if (ch.settlement?.result === 'MATCH' && ch.settlement.txHash !== lc(hash) && !ch.finals.has(lc(hash))) return; // a MATCH, another hash: 409
    const policyRacing = concurrent.some((x) => x !== c && x.k === 'settle' && x.slot !== c.slot && s.chains[x.slot]?.policy === ch.policy && ctx.hashes[x.tx] === hash);
    if (sameChainRacing || policyRacing) return; // "concurrent conflicting evidence gives 409; read the chain"
    fail(`${tag}: 409 without a MATCH or a concurrent conflict: ${res.body}`);
  }
  if (res.statusCode !== 200) fail(`${tag}: answered ${res.statusCode} ${res.body}`);
  if (body.txHash?.toLowerCase() !== lc(hash) || body.evidenceChainId !== ch.id) fail(`${tag}: answer names another chain or hash: ${res.body}`);
  if (body.requiredConfirmations !== REQUIRED) fail(`${tag}: requiredConfirmations ${body.requiredConfirmations}`);
  const own = ch.finals.get(lc(hash));
  if (own) {
    if (body.replayed !== true || body.result !== own.result || body.settlementEvidenceId !== own.evidenceId)
      fail(`${tag}: the final result ${own.result} (${own.evidenceId}) was answered as ${body.result} replayed=${body.replayed} ${body.settlementEvidenceId}`);
    return;
  }
  if (ch.settlement?.result === 'MATCH') fail(`${tag}: a chain with a MATCH accepted another hash: ${res.body}`);
  // expected reading from the single-transaction model, the minedAt rule and the claims of the policy
  const single = modelSettle(o, ch.intent, REQUIRED);
  const deep = o.kind === 'mined' && o.head - o.blockNumber + 1n >= BigInt(REQUIRED);
  const tooEarly = deep && o.minedAtMs! < ch.createdAtMs - 600_000;
  const got = { result: body.result as string, mismatches: (body.mismatches ?? []) as Array<{ field: string; expected: string; observed: string }> };
  let newCandidates: Array<[number, number]> | undefined;
  if (tooEarly) {
    if (got.result !== 'MISMATCH') fail(`${tag}: a transaction mined ${(ch.createdAtMs - o.minedAtMs!) / 60000} min before the chain answered ${got.result} ${res.body}`);
    if (single.result === 'MATCH' && mismatchKey(got.mismatches.filter((m) => m.field !== 'minedAt')) !== '') fail(`${tag}: minedAt mismatch lists other fields ${JSON.stringify(got.mismatches)}`);
    if (!got.mismatches.some((m) => m.field === 'minedAt')) fail(`${tag}: MISMATCH of an early transaction does not name minedAt: ${JSON.stringify(got.mismatches)}`);
  } else if (single.result === 'MATCH') {
    const mine = payingTransfers(o, ch.intent);
    const holders = Object.values(s.chains).filter((x) => x !== ch && x.policy === ch.policy && x.settlement?.result === 'MATCH' && x.settlement.txHash === lc(hash));
    const possible = assignable([...holders.map((h) => h.candidates!.map((t) => t[0])), mine.map((t) => t[0])]);
    if (possible) {
      if (holders.length) bump(holders.some((h) => h.candidates!.length === 1 || mine.length === 1) ? 'claim:shared-tx-forced' : 'claim:shared-tx');
      if (process.env.EVIDENCE_MODEL_SHOW && got.result === 'MATCH') console.log(res.body);
      if (got.result !== 'MATCH') fail(`${tag}: a free paying transfer exists (holders ${holders.map((h) => h.slot)}), but the answer is ${got.result} ${res.body}`);
      newCandidates = mine;
    } else {
      if (got.result === 'MATCH') fail(`${tag}: FALSE MATCH: every transfer paying it is held by chains ${holders.map((h) => h.slot)} of the same policy: ${res.body}`);
      bump('claim:blocked');
      if (got.result !== 'MISMATCH') fail(`${tag}: a claimed transfer answered ${got.result} ${res.body}`);
      if (!holders.some((h) => String(body.reason).includes(h.id))) fail(`${tag}: the MISMATCH does not name the chain holding the transfer: ${body.reason}`);
    }
  } else {
    const err = (() => {
      if (single.result === 'NO_USDC_TRANSFER') return got.result === 'MISMATCH' && got.mismatches.length === 0 ? null : 'no USDC transfer';
      if (single.result === 'MISMATCH') return got.result === 'MISMATCH' && single.candidates.some((cand) => mismatchKey(cand) === mismatchKey(got.mismatches)) ? null : `want MISMATCH ${JSON.stringify(single.candidates)}`;
      return got.result === single.result ? null : `want ${single.result}`;
    })();
    if (err) fail(`${tag}: ${err}, got ${got.result} ${JSON.stringify(got.mismatches)} (${body.reason})`);
  }
  if (got.result !== 'MISMATCH' && got.mismatches.length) fail(`${tag}: mismatches listed on ${got.result}`);
  // appended or replayed: README "an unchanged reading appends nothing (replayed: true)"
  const prev = ch.settlement;
  const unchanged = prev && prev.txHash === lc(hash) && prev.result === got.result;
  if (body.replayed === true) {
    if (!unchanged) fail(`${tag}: replayed true for a changed reading (was ${JSON.stringify(prev)}): ${res.body}`);
    if (body.settlementEvidenceId !== prev!.evidenceId) fail(`${tag}: replayed answer names ${body.settlementEvidenceId}, the recorded reading is ${prev!.evidenceId}`);
    return;
  }
  if (body.replayed !== false) fail(`${tag}: replayed ${body.replayed}`);
  if (unchanged && prev!.result === 'UNKNOWN') fail(`${tag}: an unchanged UNKNOWN reading was appended again`);
  ch.nEvents += 1;
  ch.settlement = { result: got.result, txHash: lc(hash), evidenceId: body.settlementEvidenceId, confirmations: body.confirmations };
  if (FINAL.has(got.result)) ch.finals.set(lc(hash), { result: got.result, evidenceId: body.settlementEvidenceId });
  ch.candidates = got.result === 'MATCH' ? newCandidates : undefined;
}

// ---------------------------------------------------------------------------------------------
// Checks of the observable state against the model
// ---------------------------------------------------------------------------------------------
async function checkChain(s: State, ctx: RunCtx, ch: ChainModel, inst: number) {
  const key = ctx.policies[ch.policy]!.agentKey;
  const res = await app(inst).app.inject({ method: 'GET', url: `${CHAINS}/${ch.id}`, headers: auth(key) });
  if (res.statusCode !== 200) fail(`read slot ${ch.slot}: ${res.statusCode} ${res.body}`);
  const doc = json(res);
  const events = doc.events as Array<{ evidenceId: string; sequence: number; eventType: string; body: any }>;
  const where = `chain slot ${ch.slot} (${ch.id})`;
  if (doc.intentDigest !== ch.intentDigest) fail(`${where}: intentDigest changed`);
  if (events.length !== ch.nEvents) fail(`${where}: ${events.length} events, the model has ${ch.nEvents}: ${events.map((e) => `${e.eventType}:${e.body?.result ?? ''}`).join(',')}`);
  events.forEach((e, i) => {
    if (e.sequence !== i + 1) fail(`${where}: sequence ${e.sequence} at position ${i + 1}`);
  });
  if (events[0]?.eventType !== 'PRECHECK_COMPLETED') fail(`${where}: first event ${events[0]?.eventType}`);
  if (events.filter((e) => e.eventType === 'TRANSACTION_PREFLIGHT_COMPLETED').length !== (ch.preflight === null ? 0 : 1)) fail(`${where}: preflight events`);
  const settlements = events.filter((e) => e.eventType === 'SETTLEMENT_RECONCILED');
  settlements.forEach((e, i) => {
    if (e.body.result === 'MATCH' && i !== settlements.length - 1) fail(`${where}: settlement after a MATCH`);
    const tx = String(e.body.txHash).toLowerCase();
    if (FINAL.has(e.body.result) && settlements.slice(i + 1).some((later) => String(later.body.txHash).toLowerCase() === tx)) fail(`${where}: ${tx} settled again after its final ${e.body.result}`);
  });
  const last = settlements.at(-1);
  if ((last?.evidenceId ?? null) !== (ch.settlement?.evidenceId ?? null) || (last?.body.result ?? null) !== (ch.settlement?.result ?? null))
    fail(`${where}: last settlement ${last?.evidenceId} ${last?.body.result}, model ${JSON.stringify(ch.settlement)}`);
  if (ch.events) {
    const before = JSON.stringify(ch.events);
    const now = JSON.stringify(events.slice(0, ch.events.length));
    if (before !== now) fail(`${where}: recorded events changed (not append-only)`);
  }
  ch.events = events;
  const v = verifyChain(doc, jwks);
  if (!v.ok) fail(`${where}: audit fails: ${v.problems.join('; ')}`);

  const sres = await app(inst).app.inject({ method: 'GET', url: `${CHAINS}/${ch.id}/summary`, headers: auth(key) });
  if (sres.statusCode !== 200) fail(`summary slot ${ch.slot}: ${sres.statusCode}`);
  const sum = json(sres);
  if (sum.reconciliation !== (ch.settlement?.result ?? 'NOT_SUBMITTED')) fail(`${where}: summary reconciliation ${sum.reconciliation}, model ${ch.settlement?.result ?? 'NOT_SUBMITTED'}`);
  if (ch.settlement && sum.settlement?.evidenceId !== ch.settlement.evidenceId) fail(`${where}: summary settlement ${sum.settlement?.evidenceId}`);
  if ((sum.transactionPreflight === null) !== (ch.preflight === null)) fail(`${where}: summary preflight ${JSON.stringify(sum.transactionPreflight)}`);
}

/** The claims table: within a policy no transfer twice, every MATCH chain holds exactly one transfer that pays it, nobody else holds any. */
async function checkClaims(s: State, ctx: RunCtx) {
  const policyIds = ctx.policies.map((p) => p.policyId);
  const rows = (await a.database.db.selectFrom('evidence_settlement_claims').selectAll().where('policy_id', 'in', policyIds).execute()) as Array<{
    policy_id: string;
    tx_hash: string;
    log_index: number | string;
    chain_id: string;
  }>;
  const seen = new Set<string>();
  for (const r of rows) {
    const k = `${r.policy_id}|${lc(r.tx_hash)}|${r.log_index}`;
    if (seen.has(k)) fail(`DOUBLE CLAIM of ${k}`);
    seen.add(k);
  }
  const chains = Object.values(s.chains);
  for (const ch of chains) {
    const mine = rows.filter((r) => r.chain_id === ch.id);
    if (ch.settlement?.result === 'MATCH') {
      if (mine.length !== 1) fail(`MATCH chain slot ${ch.slot} holds ${mine.length} claims`);
      const r = mine[0]!;
      if (r.policy_id !== ctx.policies[ch.policy]!.policyId || lc(r.tx_hash) !== ch.settlement.txHash) fail(`claim of slot ${ch.slot} is ${JSON.stringify(r)}`);
      if (!ch.candidates!.some(([pos, li]) => Number(r.log_index) === pos || Number(r.log_index) === li)) fail(`slot ${ch.slot} holds log ${r.log_index}, which does not pay it (${JSON.stringify(ch.candidates)})`);
    } else if (mine.length) fail(`slot ${ch.slot} (${ch.settlement?.result ?? 'no settlement'}) holds claims ${JSON.stringify(mine)}`);
  }
  const ours = new Set(chains.map((c) => c.id));
  for (const r of rows) if (!ours.has(r.chain_id)) fail(`a claim of an unknown chain ${JSON.stringify(r)}`);
}

/** The audit must fail on an edited copy: a settlement result, the intent's amount, a dropped last event, a swapped order. */
async function checkTamper(ctx: RunCtx, ch: ChainModel) {
  const res = await a.app.inject({ method: 'GET', url: `${CHAINS}/${ch.id}`, headers: auth(ctx.policies[ch.policy]!.agentKey) });
  const doc = json(res);
  const edits: Array<[string, (d: any) => unknown]> = [
    ['intent amount', (d) => (d.intent.amount = d.intent.amount === '1.5' ? '15' : '1.5')],
    ['drop last event', (d) => d.events.length > 1 && d.events.pop()],
    ['precheck decision', (d) => (d.events[0].body.decision = 'BLOCK')],
  ];
  if (ch.settlement) {
    edits.push(['settlement result', (d) => (d.events.at(-1).body.result = d.events.at(-1).body.result === 'MATCH' ? 'PENDING' : 'MATCH')]);
    edits.push(['settlement txHash', (d) => (d.events.at(-1).body.txHash = ctx.hashes.single === d.events.at(-1).body.txHash ? ctx.hashes.double : ctx.hashes.single)]);
  }
  if (doc.events.length > 2) edits.push(['swap two events', (d) => ([d.events[1], d.events[2]] = [d.events[2], d.events[1]])]);
  for (const [name, edit] of edits) {
    const copy = structuredClone(doc);
    if (edit(copy) === false) continue;
    if (verifyChain(copy, jwks).ok) fail(`chain slot ${ch.slot}: the audit passes a copy with its ${name} edited`);
  }
}

async function checkAll(s: State, ctx: RunCtx, inst = 0) {
  for (const ch of Object.values(s.chains)) await checkChain(s, ctx, ch, inst);
  await checkClaims(s, ctx);
}

// ---------------------------------------------------------------------------------------------
// Running a command
// ---------------------------------------------------------------------------------------------
async function send1(s: State, ctx: RunCtx, c: Extract<Cmd, { k: 'create' | 'preflight' | 'settle' }>): Promise<Res | null> {
  const ch = s.chains[c.slot];
  const key = ctx.policies[ctx.slots[c.slot]!.policy]!.agentKey;
  const t = app(c.inst).app;
  if (c.k === 'create') {
    return t.inject({ method: 'POST', url: CHAINS, headers: auth(key), payload: bodyOf(ctx, c.slot, ch ? c.variant : c.variant === 'changed' ? 'same' : c.variant) });
  }
  if (!ch) return null;
  if (c.k === 'preflight') return t.inject({ method: 'POST', url: `${CHAINS}/${ch.id}/preflight`, headers: auth(key), payload: preflightBody(ch.intent, c.v) });
  return t.inject({ method: 'POST', url: `${CHAINS}/${ch.id}/settlement`, headers: auth(key), payload: { txHash: c.upper ? `0x${ctx.hashes[c.tx].slice(2).toUpperCase()}` : ctx.hashes[c.tx] } });
}

function normalise(s: State, c: Extract<Cmd, { k: 'create' | 'preflight' | 'settle' }>) {
  // a 'changed' creation of a slot that does not exist yet is sent as the intent itself
  return c.k === 'create' && !s.chains[c.slot] && c.variant === 'changed' ? { ...c, variant: 'same' as const } : c;
}

async function runCmd(s: State, ctx: RunCtx, c: Cmd): Promise<State> {
  clock.advance(1000);
  if (c.k === 'mine') {
    await test.mine({ blocks: 1 });
    ctx.log.push('mine');
    return s;
  }
  if (c.k === 'read') {
    const ch = s.chains[c.slot];
    ctx.log.push(`read(${c.slot})`);
    if (!ch) {
      const res = await app(c.inst).app.inject({ method: 'GET', url: `${CHAINS}/${UNKNOWN_CHAIN_ID}`, headers: auth(ctx.policies[0]!.agentKey) });
      if (res.statusCode !== 404 || code(res) !== 'not_found') fail(`unknown chain: ${res.statusCode} ${res.body}`);
      return s;
    }
    await checkChain(s, ctx, ch, c.inst);
    const other = ctx.policies[1 - ch.policy]!.agentKey;
    const r1 = await app(c.inst).app.inject({ method: 'GET', url: `${CHAINS}/${ch.id}`, headers: auth(other) });
    if (r1.statusCode !== 404) fail(`another policy's key read slot ${c.slot}: ${r1.statusCode}`);
    const r2 = await app(c.inst).app.inject({ method: 'POST', url: `${CHAINS}/${ch.id}/settlement`, payload: { txHash: ctx.hashes.single } });
    if (r2.statusCode !== 401 || code(r2) !== 'agent_bearer_key_required' || json(r2).title !== 'Agent bearer key required') fail(`no key: ${r2.statusCode} ${r2.body}`);
    return s;
  }
  // a preflight or settlement of a slot without a chain first creates it (one request of its own)
  for (const x of c.k === 'batch' ? c.items : [c]) {
    if (x.k !== 'create' && !s.chains[x.slot]) s = await runCmd(s, ctx, { k: 'create', slot: x.slot, variant: 'same', inst: x.inst });
  }
  const items = c.k === 'batch' ? c.items.map((x) => normalise(s, x)) : [normalise(s, c)];
  ctx.log.push(c.k === 'batch' ? `batch[${items.map((x) => JSON.stringify(x)).join(' | ')}]` : JSON.stringify(items[0]));
  const answers = await Promise.all(items.map((x) => send1(s, ctx, x)));
  const obs = new Map<string, Obs>();
  for (const x of items) if (x.k === 'settle' && !obs.has(ctx.hashes[x.tx])) obs.set(ctx.hashes[x.tx], await observe(ctx.hashes[x.tx]));
  const live = items.map((x, i) => ({ x, res: answers[i] })).filter((p): p is { x: typeof p.x; res: Res } => p.res !== null);
  for (const p of live) {
    const k = `${c.k === 'batch' ? 'batch:' : ''}${p.x.k}:${p.res.statusCode}:${p.x.k === 'settle' && p.res.statusCode === 200 ? `${json(p.res).result}${json(p.res).replayed ? '(replayed)' : ''}` : code(p.res) ?? ''}`;
    STATS.set(k, (STATS.get(k) ?? 0) + 1);
  }
  if (VERBOSE) for (const p of live) ctx.log.push(`  -> ${p.res.statusCode} ${p.res.body.slice(0, 300)}`);
  // the answers must agree with the model in SOME order of the concurrent requests
  const orders = permutations(live.map((_, i) => i));
  const errors: string[] = [];
  for (const order of orders) {
    const t = structuredClone(s);
    try {
      for (const i of order) apply(t, ctx, live[i]!.x, live[i]!.res, obs, items);
      await checkAll(t, ctx, c.k === 'batch' ? 1 : (items[0] as { inst: number }).inst);
      return t;
    } catch (e) {
      if (!(e instanceof ModelError)) throw e;
      errors.push(e.message);
      if (orders.length === 1) throw e;
    }
  }
  fail(`no order of the concurrent requests agrees with the model:\n  ${[...new Set(errors)].join('\n  ')}\n  answers: ${live.map((p) => `${p.res.statusCode} ${p.res.body.slice(0, 400)}`).join('\n    ')}`);
}

function permutations(xs: number[]): number[][] {
  if (xs.length <= 1) return [xs];
  return xs.flatMap((x, i) => permutations([...xs.slice(0, i), ...xs.slice(i + 1)]).map((p) => [x, ...p]));
}

// ---------------------------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------------------------
const TX_ARB = fc.oneof(
  { arbitrary: fc.constantFrom<TxKey>('double', 'doubleMixed'), weight: 8 },
  { arbitrary: fc.constantFrom<TxKey>('single', 'fresh', 'plusOther'), weight: 5 },
  { arbitrary: fc.constantFrom<TxKey>('early', 'singleS5', 'wrong', 'reverted', 'r2', 'unknown', 'unknown2'), weight: 3 },
);
const slotArb = fc.nat({ max: 4 });
const inst = fc.constantFrom(0, 1);
const createArb = fc.record({ k: fc.constant('create' as const), slot: slotArb, variant: fc.constantFrom('same' as const, 'same' as const, 'cosmetic' as const, 'changed' as const, 'otherAgent' as const), inst });
const preflightArb = fc.record({ k: fc.constant('preflight' as const), slot: slotArb, v: fc.constantFrom(0, 1), inst });
const settleArb = fc.record({ k: fc.constant('settle' as const), slot: slotArb, tx: TX_ARB, inst, upper: fc.constantFrom(false, false, false, true) });
const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  { arbitrary: createArb, weight: 4 },
  { arbitrary: preflightArb, weight: 1 },
  { arbitrary: settleArb, weight: 7 },
  { arbitrary: fc.record({ k: fc.constant('read' as const), slot: slotArb, inst }), weight: 1 },
  { arbitrary: fc.constant({ k: 'mine' as const }), weight: 2 },
  {
    arbitrary: fc.record({ k: fc.constant('batch' as const), items: fc.array(fc.oneof({ arbitrary: settleArb, weight: 4 }, { arbitrary: createArb, weight: 1 }, { arbitrary: preflightArb, weight: 1 }), { minLength: 2, maxLength: 4 }) }),
    weight: 2,
  },
  {
    // several chains reconciled at once against one transaction: the claims race
    arbitrary: fc
      .tuple(fc.constantFrom<TxKey>('double', 'doubleMixed', 'doubleMixed', 'single', 'plusOther', 'fresh'), fc.uniqueArray(slotArb, { minLength: 2, maxLength: 4 }), fc.array(inst, { minLength: 4, maxLength: 4 }))
      .map(([tx, slots, insts]): Cmd => ({ k: 'batch', items: slots.map((slot, i) => ({ k: 'settle' as const, slot, tx, inst: insts[i]! })) })),
    weight: 2,
  },
);
const scenarioArb = fc.record({
  slots: fc.array(fc.record({ tpl: fc.constantFrom(0, 0, 0, 1, 1, 1, 2, 3, 4), policy: fc.constantFrom(0, 0, 0, 1) }), { minLength: 3, maxLength: 5 }),
  cmds: fc.array(cmdArb, { minLength: 1, maxLength: 22 }),
});
type Scenario = { slots: Array<{ tpl: number; policy: number }>; cmds: Cmd[] };

async function pilotPolicy(): Promise<Created> {
  const p = await createPolicy(a, { allowedRecipients: [addr(R), addr(R2)], blockUnknownRecipients: true, requireHumanAbove: '1000', maxPerTransaction: '1000', dailyBudget: '100000', maxRepeats: 1000 });
  await new PolicyStore(a.database).setDirectChecks(p.policyId, true, clock.now());
  return p;
}

// Hand-picked starting points (fast-check runs them first): a chain without expectedFrom holds the
// payer's transfer of doubleMixed, then two chains that only the payer's transfer pays race for it
// (on two instances), and a third chain comes last: every one of them needs the holder to move.
const race = (tx: TxKey): Scenario => ({
  slots: [{ tpl: 1, policy: 0 }, { tpl: 0, policy: 0 }, { tpl: 0, policy: 0 }, { tpl: 0, policy: 0 }],
  cmds: [
    { k: 'settle', slot: 0, tx, inst: 0 },
    { k: 'create', slot: 1, variant: 'same', inst: 0 },
    { k: 'create', slot: 2, variant: 'same', inst: 1 },
    { k: 'create', slot: 3, variant: 'same', inst: 1 },
    { k: 'batch', items: [{ k: 'settle', slot: 1, tx, inst: 0 }, { k: 'settle', slot: 2, tx, inst: 1 }] },
    { k: 'settle', slot: 3, tx, inst: 0 },
  ],
});
const EXAMPLES: Array<[Scenario]> = [[race('doubleMixed')], [race('doubleMixed')], [race('doubleMixed')]];

let runNo = 0;
const STATS = new Map<string, number>();
const bump = (k: string) => STATS.set(k, (STATS.get(k) ?? 0) + 1);
async function runScenario(sc: Scenario): Promise<void> {
  runNo += 1;
  const fix = (slot: number) => slot % sc.slots.length;
  const cmds = sc.cmds.map((c): Cmd => (c.k === 'mine' ? c : c.k === 'batch' ? { ...c, items: c.items.map((x) => ({ ...x, slot: fix(x.slot) })) } : { ...c, slot: fix(c.slot) }));
  const policies = [await pilotPolicy(), await pilotPolicy()];
  // this run's own transfer, still in the mempool: PENDING (not mined), then 1 confirmation, then final
  const fresh = await wallet(PAYER).sendTransaction({ to: USDC_ADDRESS, data: transfer(R, 1_500_000n), gas: 100_000n });
  const rnd = () => `0x${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex')}` as Hash;
  const ctx: RunCtx = {
    policies,
    slots: sc.slots,
    requestIds: sc.slots.map((_, i) => `model-${runNo}-${i}`),
    hashes: { ...pool, fresh, unknown: rnd(), unknown2: rnd() },
    log: [],
  };
  let s: State = { chains: {} };
  try {
    for (const c of cmds) s = await runCmd(s, ctx, c);
    await checkAll(s, ctx, 1);
    for (const ch of Object.values(s.chains)) await checkTamper(ctx, ch);
  } catch (e) {
    if (e instanceof ModelError) {
      e.message = `${e.message}\n  slots: ${JSON.stringify(sc.slots.map((x) => ({ ...TEMPLATES[x.tpl], policy: x.policy })))}\n  steps:\n    ${ctx.log.join('\n    ')}`;
    }
    throw e;
  } finally {
    await test.mine({ blocks: 1 }); // the mempool empties between runs
  }
}

beforeAll(async () => {
  devnet = await startDevnet();
  pub = createPublicClient({ chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  sender = devnetSender(devnet, pub, 30);
  test = createTestClient({ mode: 'anvil', chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });

  // "early" is mined about 12 hours before every chain is created: the service's clock stands
  // 12 hours after it, and Base's clock moves a day on before the rest of the pool is mined.
  pool.early = await send(PAYER, USDC_ADDRESS, transfer(R, 1_500_000n));
  const earlyAt = Number((await pub.getBlock({ blockNumber: (await pub.getTransactionReceipt({ hash: pool.early })).blockNumber })).timestamp) * 1000;
  clock = new ManualClock(new Date(earlyAt + 12 * 3600_000));
  await test.increaseTime({ seconds: 86_400 });
  await test.mine({ blocks: 1 });

  for (const from of [PAYER, S5]) await send(from, USDC_ADDRESS, sender.approveMulticall(500_000_000n));
  pool.single = await send(PAYER, USDC_ADDRESS, transfer(R, 1_500_000n));
  pool.singleS5 = await send(S5, USDC_ADDRESS, transfer(R, 1_500_000n));
  pool.double = await send(PAYER, MULTICALL3_ADDRESS, multicall([transferFrom(PAYER, R, 1_500_000n), transferFrom(PAYER, R, 1_500_000n)]));
  // the payer's transfer first: a chain without expectedFrom may take it, and must make room for a chain that names the payer
  pool.doubleMixed = await send(PAYER, MULTICALL3_ADDRESS, multicall([transferFrom(PAYER, R, 1_500_000n), transferFrom(S5, R, 1_500_000n)]));
  pool.plusOther = await send(PAYER, MULTICALL3_ADDRESS, multicall([transferFrom(PAYER, R, 1_500_000n), transferFrom(PAYER, R2, 2_000_000n)]));
  pool.wrong = await send(PAYER, USDC_ADDRESS, transfer(R, 1_499_999n));
  pool.reverted = await send(POOR, USDC_ADDRESS, transfer(R, 2_000_000_000n), 100_000n);
  pool.r2 = await send(PAYER, USDC_ADDRESS, transfer(R2, 2_000_000n));
  expect((await pub.getTransactionReceipt({ hash: pool.reverted })).status).toBe('reverted');
  await test.mine({ blocks: REQUIRED });
  await test.setAutomine(false);

  const config = { rpcUrls: [devnet.rpcUrl], minConfirmations: REQUIRED };
  a = await createTestApp({ clock, config });
  shared = await sharedDatabase(a.database);
  b = await createTestApp({ clock, config, database: shared });
  const keys = [...json<JwksDocument>(await a.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).keys, ...json<JwksDocument>(await b.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).keys];
  jwks = { keys };
}, 120_000);

afterAll(async () => {
  if (process.env.EVIDENCE_MODEL_STATS) console.log([...STATS].sort().map(([k, n]) => `${k} ${n}`).join('\n'));
  await b?.close();
  await shared?.close();
  await a?.close();
  await devnet?.stop();
});

describe(`evidence-chain state machine against the model (${testDialect})`, () => {
  it(
    'generated sequences of create, preflight, settlement, reads, mining and concurrent requests on two instances',
    async () => {
      await fc.assert(
        fc.asyncProperty(scenarioArb, (sc) => runScenario(sc as Scenario)),
        { examples: process.env.EVIDENCE_MODEL_EXAMPLES === '0' ? [] : EXAMPLES, numRuns: RUNS, seed: SEED, endOnFailure: !process.env.EVIDENCE_MODEL_SHRINK, verbose: 1 },
      );
    },
    Number(process.env.EVIDENCE_MODEL_TIMEOUT_MS ?? 600_000),
  );
});
