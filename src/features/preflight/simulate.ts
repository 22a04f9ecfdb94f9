import { getAddress, isHex, numberToHex, pad, slice, type Address, type Hex } from 'viem';
import { SIMULATED_GAS_PRICE, type ChainClient } from '../../platform/chain.js';
import { TRANSFER_TOPIC } from '../reports/usdc-transfers.js';
import { contextCall, decodeContext, type Context, type ContextRequest } from './context.js';
import { NATIVE_TOKEN, ZERO_ADDRESS, same } from './known.js';
import { attempt, methodMissing, optional, rpc } from './rpc.js';
import { rawLog, summariseTrace, traceLogs, type CallFrame, type TraceSummary } from './trace.js';

/**
 * Runs the unsigned transaction against the node's latest state, without signing or sending.
 *
 * Primary: one eth_simulateV1 request carrying three calls in one simulated block: the context
 * read (account kinds and token metadata, see context.ts), the transaction, and, when it sends
 * value, the same call without value (a revert that disappears without value means the
 * destination rejects ETH). traceTransfers makes native value visible as Transfer logs.
 * In parallel, debug_traceCall (callTracer with logs) shows the call tree, which is the only
 * place a delegatecall can be seen. Fallback when the node lacks eth_simulateV1: eth_call for
 * the outcome, the trace for logs and value flows, and an eth_call for the context.
 */

export interface RawLog {
  address: Address;
  topics: Hex[];
  data: Hex;
}

export interface NativeTransfer {
  from: Address;
  to: Address;
  value: bigint;
}

export interface SimTx {
  from: Address;
  to: Address;
  value: bigint;
  data: Hex;
}

export type StateOverrides = Record<string, { balance?: Hex; stateDiff?: Record<Hex, Hex>; code?: Hex }>;

export interface Simulation {
  /** How the outcome was obtained; null when nothing could run. */
  method: 'eth_simulateV1' | 'debug_traceCall' | 'eth_call' | null;
  success: boolean | null;
  revertData: Hex | null;
  gasUsed: bigint | null;
  logs: RawLog[];
  nativeTransfers: NativeTransfer[];
  /** true: reverts with value but not without; null: not measured. */
  valueRejected: boolean | null;
  /** block.number as the transaction saw it: the latest block, or the next on nodes that simulate a new one. */
  blockNumber: bigint | null;
  context: Context | null;
  /** null when the node serves no debug_traceCall. */
  trace: TraceSummary | null;
  /** Why the transaction fails when there is no revert data (the sender cannot pay the value). */
  failure: string | null;
  /** Why the simulation could not run (then success is null). */
  unavailable: string | null;
}

interface SimCallResult {
  status: Hex;
  returnData: Hex;
  gasUsed: Hex;
  logs?: { address: Address; topics: Hex[]; data: Hex }[];
  error?: { code?: number; message?: string; data?: Hex };
}

/** A node that lacks eth_simulateV1 is remembered for a while so later reports skip the failing request. */
const NO_SIMULATE_FOR_MS = 10 * 60_000;
const noSimulateUntil = new WeakMap<ChainClient, number>();

const callObject = (tx: SimTx, value = tx.value) => ({
  from: tx.from,
  to: tx.to,
  data: tx.data,
  ...(value > 0n ? { value: numberToHex(value) } : {}),
});

/**
 * The transaction's calls in eth_simulateV1 pay SIMULATED_GAS_PRICE (their block has that base
 * fee, though nodes report block.basefee as 0 when not validating). Their gas limit is set, so
 * that what the sender pays for it is known: SIMULATED_GAS x SIMULATED_GAS_PRICE.
 */
const SIMULATED_GAS = 30_000_000n;
/** Funders of the simulated calls' gas; each one's code selfdestructs to the sender. */
const GAS_FUNDERS: Address[] = ['0x00000000000000000000000000000000fee5f00d', '0x00000000000000000000000000000000fee5f00e'];

const paying = (c: { from: Address; to: Address; data: Hex; value?: Hex }) => ({ ...c, gas: numberToHex(SIMULATED_GAS), gasPrice: numberToHex(SIMULATED_GAS_PRICE) });

/**
 * A call just before a paying call that hands the sender exactly its gas money,
 * SIMULATED_GAS x SIMULATED_GAS_PRICE: a funder whose code is `selfdestruct(sender)` (which runs
 * no code of the sender's, whatever it is). So a sender who can pay the value passes the node's
 * balance check as at gas price 0, and one who cannot still fails it: the check stays about the
 * value, as for the real transaction, whose gas the wallet estimates.
 */
function gasFunding(sender: Address, i: number) {
  const funder = GAS_FUNDERS[i]!;
  return {
    override: { [funder]: { balance: numberToHex(SIMULATED_GAS * SIMULATED_GAS_PRICE), code: `0x73${sender.slice(2).toLowerCase()}ff` as Hex } },
    call: { from: ZERO_ADDRESS, to: funder, data: '0x' as Hex },
  };
}

export async function simulate(chain: ChainClient, tx: SimTx, overrides: StateOverrides, ctx: ContextRequest, nowMs: number): Promise<Simulation> {
  const context = contextCall(ctx);
  const allOverrides = { ...overrides, ...context.stateOverride };
  const trySimulate = (noSimulateUntil.get(chain) ?? 0) <= nowMs;
  const traceP = optional(
    rpc<CallFrame>(chain, 'debug_traceCall', [callObject(tx), 'latest', { tracer: 'callTracer', tracerConfig: { withLog: true }, stateOverrides: overrides }]),
  );
  // [context, fund, transaction] and, with value, [fund, the transaction without value].
  const funding = (tx.value > 0n ? [tx.value, 0n] : [tx.value]).map((value, i) => ({ ...gasFunding(tx.from, i), paid: paying(callObject(tx, value)) }));
  const calls = [{ from: ZERO_ADDRESS, to: context.to, data: context.data }, ...funding.flatMap((f) => [f.call, f.paid])];
  const simP = trySimulate
    ? attempt(rpc<{ number: Hex; calls: SimCallResult[] }[]>(chain, 'eth_simulateV1', [
        {
          blockStateCalls: [{ stateOverrides: Object.assign({}, allOverrides, ...funding.map((f) => f.override)), blockOverrides: { baseFeePerGas: numberToHex(SIMULATED_GAS_PRICE) }, calls }],
          traceTransfers: true,
          validation: false,
        },
        'latest',
      ]))
    : null;
  // On a node known to lack eth_simulateV1 the fallback's two eth_calls ride in the first round.
  const callP = trySimulate ? null : attempt(rpc<Hex>(chain, 'eth_call', [callObject(tx), 'latest', overrides]));
  const ctxP = trySimulate ? null : optional(rpc<Hex>(chain, 'eth_call', [{ to: context.to, data: context.data }, 'latest', context.stateOverride]));
  const [traced, simulated, callRead, ctxRead] = await Promise.all([traceP, simP, callP, ctxP]);
  const trace = traced.ok ? summariseTrace(traced.value, tx.from) : null;

  if (simulated?.ok) {
    const block = simulated.value[0];
    // The funding calls only hand the sender its gas money.
    const [ctxResult, , main, , bare] = block?.calls ?? [];
    if (block && ctxResult && main) return fromSimulateV1(block.number, ctxResult, main, bare, ctx, trace);
  }
  if (simulated && !simulated.ok && methodMissing(simulated.error)) noSimulateUntil.set(chain, nowMs + NO_SIMULATE_FOR_MS);
  // The node refuses to run a transaction whose sender cannot pay its value; that is an outcome.
  const broke = simulated && !simulated.ok && INSUFFICIENT.test(simulated.error.message) ? { ok: false as const, error: simulated.error } : null;
  return fallback(chain, tx, overrides, ctx, traced.ok ? traced.value : null, trace, { call: broke ?? callRead, ctx: ctxRead, broke: !!broke }, context);
}

type Attempt = Awaited<ReturnType<typeof attempt<Hex>>>;
const INSUFFICIENT = /insufficient (funds|balance)/i;
const BROKE = 'the sender cannot pay the value and gas of this transaction (insufficient ETH)';

function fromSimulateV1(number: Hex, ctxResult: SimCallResult, main: SimCallResult, bare: SimCallResult | undefined, ctx: ContextRequest, trace: TraceSummary | null): Simulation {
  const success = BigInt(main.status) === 1n;
  const logs: RawLog[] = [];
  const nativeTransfers: NativeTransfer[] = [];
  for (const log of success ? (main.logs ?? []) : []) {
    const l = rawLog(log);
    if (same(l.address, NATIVE_TOKEN)) {
      if (l.topics[0] === TRANSFER_TOPIC && l.topics.length === 3) {
        nativeTransfers.push({ from: topicAddress(l.topics[1]!), to: topicAddress(l.topics[2]!), value: BigInt(l.data) });
      }
    } else {
      logs.push(l);
    }
  }
  const revertData = success ? null : isHex(main.error?.data) ? main.error!.data! : main.returnData;
  return {
    method: 'eth_simulateV1',
    success,
    revertData,
    gasUsed: BigInt(main.gasUsed),
    logs,
    nativeTransfers,
    valueRejected: bare ? !success && BigInt(bare.status) === 1n : null,
    blockNumber: BigInt(number),
    context: BigInt(ctxResult.status) === 1n ? decodeContext(ctx, ctxResult.returnData) : null,
    trace,
    failure: null,
    unavailable: null,
  };
}

async function fallback(
  chain: ChainClient,
  tx: SimTx,
  overrides: StateOverrides,
  ctx: ContextRequest,
  frame: CallFrame | null,
  trace: TraceSummary | null,
  first: { call: Attempt | null; ctx: Attempt | null; broke: boolean },
  context: ReturnType<typeof contextCall>,
): Promise<Simulation> {
  // Reads the first round did not make (eth_simulateV1 was tried, and failed, instead).
  const [called, ctxAgain] = await Promise.all([
    first.call ?? attempt(rpc<Hex>(chain, 'eth_call', [callObject(tx), 'latest', overrides])),
    first.ctx ?? optional(rpc<Hex>(chain, 'eth_call', [{ to: context.to, data: context.data }, 'latest', context.stateOverride])),
  ]);
  const decoded = ctxAgain.ok ? decodeContext(ctx, ctxAgain.value) : null;
  const base = { valueRejected: null, blockNumber: decoded?.blockNumber ?? null, context: decoded, trace };
  const failure = !called.ok && INSUFFICIENT.test(called.error.message) ? BROKE : null;
  const reverted = !called.ok && (called.error.code === 3 || /revert/i.test(called.error.message));
  if (called.ok || reverted || failure) {
    const success = called.ok;
    const flows = frame && success ? traceLogs(frame) : { logs: [], nativeTransfers: [] };
    const revertData = called.ok || failure ? null : isHex(called.error.data) ? called.error.data : frame?.output ?? '0x';
    return {
      method: first.broke ? 'eth_simulateV1' : frame ? 'debug_traceCall' : 'eth_call',
      success,
      revertData,
      gasUsed: frame ? BigInt(frame.gasUsed) : null,
      ...flows,
      ...base,
      failure,
      unavailable: null,
    };
  }
  return {
    method: null,
    success: null,
    revertData: null,
    gasUsed: null,
    logs: [],
    nativeTransfers: [],
    ...base,
    failure: null,
    // The node's own words are not quoted: they are the provider's text (it may name a URL or a
    // key) and this text is signed into evidence; the JSON-RPC code says what kind of refusal it was.
    unavailable: `the node could not simulate the transaction (eth_simulateV1 and eth_call were refused${called.error.code === null ? '' : `, JSON-RPC error ${called.error.code}`})`,
  };
}

export const topicAddress = (t: Hex): Address => getAddress(slice(pad(t, { size: 32 }), 12));
