import { randomBytes } from 'node:crypto';
import { encodeAbiParameters, getAddress, keccak256, numberToHex, pad, type Address, type Hex } from 'viem';
import type { Static } from 'typebox';
import { digestOf } from '../../platform/canonical.js';
import { blockRanges, readOnBase, type ChainClient } from '../../platform/chain.js';
import type { PreflightRequest } from '../reports/schemas.js';
import { TRANSFER_TOPIC } from '../reports/usdc-transfers.js';
import { approvalsOf, assetChanges, balanceChanges, decodeLogs, movementsOf } from './assets.js';
import { counterpartyOf, decodeCalldata, type CalldataDecoding } from './calldata.js';
import { contextCall, decodeContext, type Context } from './context.js';
import { findingsOf, kindOf, recipientsOf, undecodedApprovals, type PreflightEvidence } from './findings.js';
import { STATIC_TOKENS, USDC, knownAs, type TokenMeta } from './known.js';
import { decodeRevert } from './revert.js';
import { optional, preflightRpcCounter, rpc } from './rpc.js';
import type { PreflightReport } from './schemas.js';
import { simulate, topicAddress, type StateOverrides } from './simulate.js';
import { WORD } from './trace.js';
import { verdictOf } from './verdict.js';

export type PreflightInput = Static<typeof PreflightRequest>;

export interface PreflightOptions {
  /** How far back `from`'s USDC transfers are read for the poisoning check. */
  poisonLookbackBlocks?: number;
  /**
   * The most blocks one eth_getLogs may span (RPC_LOG_BLOCK_RANGE): an RPC that refuses the
   * lookback in one request gets it again in pieces within this range.
   */
  logBlockRange?: number;
}

/** ~5.5 hours of Base blocks: the range most providers accept for one eth_getLogs. */
export const DEFAULT_POISON_LOOKBACK_BLOCKS = 10_000;
/** At most this many eth_getLogs for the lookback of a provider that caps ranges. */
const MAX_LOG_PIECES = 10;
const FRESH_ETH = 10n ** 24n;
const FRESH_USDC = 10n ** 15n;
/** FiatTokenV2_2 keeps balances in `balanceAndBlacklistStates`, storage slot 9 (the high bit is the blacklist flag). */
const USDC_BALANCE_SLOT = 9n;
const MAX_CONTEXT_ACCOUNTS = 32;

export const PREFLIGHT_NOTE =
  "Nothing was signed, sent or executed. The simulation ran on the node's latest state; the outcome can differ if that state changes before the transaction is mined.";

/** The unsigned transaction in one canonical form: what inputDigest covers. */
export function normalisePreflightInput(input: PreflightInput) {
  return {
    chain: 'base' as const,
    to: input.to.toLowerCase(),
    from: input.from ? input.from.toLowerCase() : null,
    valueWei: BigInt(input.valueWei ?? '0').toString(),
    data: (input.data ?? '0x').toLowerCase(),
  };
}

export function preflightInputDigest(input: PreflightInput): string {
  return digestOf(normalisePreflightInput(input));
}

/** A fresh sender with ETH for value and gas, and USDC, so that a sender-less preflight of a payment can run. */
function fundFresh(sender: Address): StateOverrides {
  const slot = keccak256(encodeAbiParameters([{ type: 'address' }, { type: 'uint256' }], [sender, USDC_BALANCE_SLOT]));
  return { [sender]: { balance: numberToHex(FRESH_ETH) }, [USDC]: { stateDiff: { [slot]: pad(numberToHex(FRESH_USDC)) } } };
}

function contextTargets(to: Address, decoded: CalldataDecoding): { accounts: Address[]; tokens: Address[] } {
  const accounts = new Map<string, Address>([[to.toLowerCase(), to]]);
  const tokens = new Map<string, Address>([[to.toLowerCase(), to]]);
  for (const a of decoded.actions) {
    tokens.set(a.token.toLowerCase(), a.token);
    const who = counterpartyOf(a);
    accounts.set(who.toLowerCase(), getAddress(who));
  }
  return {
    accounts: [...accounts.values()].slice(0, MAX_CONTEXT_ACCOUNTS),
    tokens: [...tokens.values()].filter((t) => !STATIC_TOKENS[t.toLowerCase()]).slice(0, MAX_CONTEXT_ACCOUNTS),
  };
}

/**
 * The paid transaction preflight. RPC requests, main path: eth_simulateV1 and debug_traceCall in
 * parallel, then in parallel at most eth_getLogs (the poisoning check, only with a sender and a
 * recipient) and one eth_call (metadata of tokens first seen in the simulation): at most 4 in
 * 2 rounds. A node known to lack eth_simulateV1: debug_traceCall, eth_call and the context
 * eth_call, then the same second round (4 in the usual case, 5 when both second-round reads are
 * needed; the first report that discovers the missing method makes 2 more in a middle round).
 * The first report on a client also asks eth_chainId, in the first round: an RPC that does not
 * serve Base is refused before anything it answered is used. An RPC that refuses the poisoning
 * check's 10,000 blocks in one eth_getLogs (a provider's range cap) costs one more round of at
 * most MAX_LOG_PIECES requests within RPC_LOG_BLOCK_RANGE.
 * Transport failures and another chain are AppError upstream_unavailable (502, nothing charged).
 */
export async function transactionPreflight(chain: ChainClient, input: PreflightInput, now: Date, opts: PreflightOptions = {}): Promise<PreflightReport> {
  const to = getAddress(input.to);
  const senderProvided = input.from !== undefined;
  const from = input.from ? getAddress(input.from) : getAddress(`0x${randomBytes(20).toString('hex')}`);
  const value = BigInt(input.valueWei ?? '0');
  const data = (input.data ?? '0x').toLowerCase() as Hex;
  const decoded = decodeCalldata(to, data, from);
  const targets = contextTargets(to, decoded);

  // The simulation is trusted, and the second round sent, only once the RPC says it serves Base.
  const sim = await readOnBase(
    chain,
    () => simulate(chain, { from, to, value, data }, senderProvided ? {} : fundFresh(from), targets, now.getTime()),
    () => void preflightRpcCounter.requests++,
  );
  const ctx: Context = sim.context ?? { blockNumber: null, accounts: new Map(), tokens: new Map() };
  const tokens = new Map<string, TokenMeta>([...Object.entries(STATIC_TOKENS), ...ctx.tokens]);
  const movements = movementsOf(sim.logs, sim.nativeTransfers);
  const logApprovals = undecodedApprovals(approvalsOf(sim.logs, from), decoded);
  const accounts = new Map(ctx.accounts);

  // Tokens and spenders first seen in the simulation: their metadata and account kinds.
  const firstSeen = (addresses: Address[], known: Map<string, unknown>) => [...new Set(addresses.filter((a) => !known.has(a.toLowerCase())))].slice(0, MAX_CONTEXT_ACCOUNTS);
  const unseen = firstSeen([...movements.filter((m) => m.standard !== 'native').map((m) => m.token), ...logApprovals.map((x) => x.token)], tokens);
  const unseenAccounts = firstSeen(logApprovals.map(counterpartyOf), accounts);
  const needPeers = senderProvided && recipientsOf({ tx: { from, to, value, data }, decoded, movements, logApprovals }).length > 0;
  const lookback = BigInt(opts.poisonLookbackBlocks ?? DEFAULT_POISON_LOOKBACK_BLOCKS);
  const [more, peers] = await Promise.all([
    unseen.length > 0 || unseenAccounts.length > 0 ? readContext(chain, unseenAccounts, unseen) : null,
    needPeers && sim.blockNumber !== null ? recentPayees(chain, from, sim.blockNumber, lookback, opts.logBlockRange) : null,
  ]);
  for (const [k, v] of more?.tokens ?? []) tokens.set(k, v);
  for (const [k, v] of more?.accounts ?? []) accounts.set(k, v);

  const revert =
    sim.success !== false ? null
    : sim.failure ? { kind: 'insufficient-funds' as const, reason: sim.failure, selector: null, errorName: null, args: null }
    : decodeRevert(sim.revertData);
  // A plain eth_call that succeeded shows no logs and no value flows: what the transaction would
  // move is unknown, so it is not a simulation an ALLOW could rest on (INCOMPLETE unless a
  // finding decides).
  const blind = sim.method === 'eth_call' && sim.success === true;
  const evidence: PreflightEvidence = {
    tx: { from, to, value, data },
    senderProvided,
    decoded,
    logApprovals,
    accounts,
    tokens,
    simulation: {
      ran: sim.success !== null && !blind,
      success: sim.success,
      revert,
      valueRejected: sim.valueRejected,
      unavailable: blind ? BLIND_CALL : sim.unavailable,
    },
    trace: sim.trace,
    movements,
    counterparties: peers ?? null,
    counterpartiesFailed: needPeers && peers === null,
  };
  const findings = findingsOf(evidence, now);
  const dest = ctx.accounts.get(to.toLowerCase());
  const kind = kindOf(to, ctx.accounts);
  const meta = tokens.get(to.toLowerCase());

  return {
    verdict: verdictOf(findings, evidence),
    destination: {
      address: to,
      kind,
      codeSize: dest?.codeSize ?? null,
      delegate: dest?.delegate ?? null,
      knownAs: knownAs(to),
      ...(meta?.standard ? { tokenInfo: { standard: meta.standard, name: meta.name, symbol: meta.symbol, decimals: meta.decimals, totalSupply: meta.totalSupply?.toString() ?? null } } : {}),
    },
    call: decoded.calls.map((c) => ({ path: c.path, target: c.target, selector: c.selector, function: c.function, args: c.args })),
    simulation: {
      method: sim.method,
      sender: from,
      senderProvided,
      success: sim.success,
      revertReason: revert?.reason ?? null,
      revertData: sim.success === false ? sim.revertData : null,
      gasUsed: sim.gasUsed === null ? null : Number(sim.gasUsed),
      assetChanges: assetChanges(movements, tokens),
      balanceChanges: balanceChanges(movements, tokens),
      logsDecoded: decodeLogs(sim.logs),
      blockNumber: sim.blockNumber === null ? null : Number(sim.blockNumber),
      traced: sim.trace !== null,
    },
    findings,
    inputDigest: preflightInputDigest(input),
    checkedAt: now.toISOString(),
    note: PREFLIGHT_NOTE,
  };
}

/**
 * Metadata of tokens and kinds of accounts the simulation revealed (a swap's output, a spender
 * approved inside a wallet call): one eth_call. Unreadable is unknown, not an error.
 */
async function readContext(chain: ChainClient, accounts: Address[], tokens: Address[]): Promise<Pick<Context, 'accounts' | 'tokens'> | null> {
  const req = { accounts, tokens };
  const call = contextCall(req);
  const r = await optional(rpc<Hex>(chain, 'eth_call', [{ to: call.to, data: call.data }, 'latest', call.stateOverride]));
  if (!r.ok) return null;
  try {
    return decodeContext(req, r.value);
  } catch {
    return null; // an answer that is not the call's output: as unreadable
  }
}

/**
 * Addresses `from` sent USDC to (non-zero amounts: zero-value transfers are what poisoners forge),
 * in the last `lookback` blocks: one eth_getLogs, or, when the RPC refuses that range (a provider's
 * cap), the same blocks again in at most MAX_LOG_PIECES requests of at most `logBlockRange` blocks.
 * null when they cannot be read.
 */
async function recentPayees(chain: ChainClient, from: Address, head: bigint, lookback: bigint, logBlockRange?: number): Promise<Address[] | null> {
  // `head` may be one past the node's latest block (a simulated block): 'latest' keeps the range valid.
  const start = head > lookback ? head - lookback : 0n;
  const logs = (fromBlock: bigint, toBlock: bigint | 'latest') =>
    optional(
      rpc<{ topics: Hex[]; data: Hex }[]>(chain, 'eth_getLogs', [
        { address: USDC, topics: [TRANSFER_TOPIC, pad(from.toLowerCase() as Hex)], fromBlock: numberToHex(fromBlock), toBlock: toBlock === 'latest' ? 'latest' : numberToHex(toBlock) },
      ]),
    );
  const whole = await logs(start, 'latest');
  let found = whole.ok ? whole.value : null;
  // An answered refusal (not a transport failure) with a range to keep to: read it in pieces. The
  // last piece ends at 'latest', which moves on while the pieces are read: a margin of a tenth of
  // the range (at most 30 blocks, a minute of Base) keeps it within the cap.
  if (!whole.ok && whole.error.code !== null && logBlockRange !== undefined && logBlockRange > 1) {
    const size = BigInt(logBlockRange - Math.min(30, Math.floor(logBlockRange / 10)));
    const first = head - start + 1n > size * BigInt(MAX_LOG_PIECES) ? head - size * BigInt(MAX_LOG_PIECES) + 1n : start;
    const pieces = [...blockRanges(first, head, size)];
    const read = await Promise.all(pieces.map(([a, b], i) => logs(a, i === pieces.length - 1 ? 'latest' : b)));
    found = read.every((r) => r.ok) ? read.flatMap((r) => (r.ok ? r.value : [])) : null;
  }
  // An answer that is not a list of Transfer logs (a node's odd shape) is as unreadable as none.
  if (found === null || !Array.isArray(found) || !found.every(isTransferLog)) return null;
  const out = new Map<string, Address>();
  for (const l of found) if (l.data !== '0x' && BigInt(l.data) > 0n) out.set(l.topics[2]!.toLowerCase(), topicAddress(l.topics[2]!));
  return [...out.values()];
}

/** A log with a payee topic (32 bytes) and a value word, as USDC's Transfer has. */
function isTransferLog(l: unknown): l is { topics: Hex[]; data: Hex } {
  const { topics, data } = (l ?? {}) as { topics?: unknown; data?: unknown };
  return Array.isArray(topics) && typeof topics[2] === 'string' && WORD.test(topics[2]) && typeof data === 'string' && /^0x[0-9a-fA-F]{0,64}$/.test(data);
}

const BLIND_CALL =
  'the node runs the call (eth_call) but serves neither eth_simulateV1 nor debug_traceCall, so the asset movements of the transaction are unknown';
