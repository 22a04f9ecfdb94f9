import { getAddress, size, slice, type Address, type Hex } from 'viem';
import { same } from './known.js';
import type { NativeTransfer, RawLog } from './simulate.js';

/** One frame of debug_traceCall's callTracer output (geth's shape, which anvil and reth share). */
export interface CallFrame {
  type: string;
  from: string;
  to?: string;
  value?: Hex;
  input?: Hex;
  output?: Hex;
  error?: string;
  revertReason?: string;
  gasUsed: Hex;
  calls?: CallFrame[];
  logs?: { address: string; topics: Hex[]; data: Hex; position?: Hex }[];
}

export interface DelegateCall {
  /** The account whose storage and balance the borrowed code runs with. */
  context: Address;
  /** Where the borrowed code lives. */
  target: Address;
  selector: Hex | null;
  /**
   * A proxy forwarding its own calldata unchanged (EIP-1967, EIP-1167, USDC's FiatTokenProxy):
   * the normal way upgradeable contracts work, so not alarming by itself.
   */
  forwarding: boolean;
  /** Delegatecall into its own code: the multicall(bytes[]) pattern. */
  selfCall: boolean;
  /** The borrowed code runs as the sender's own account (EIP-7702 or smart-wallet code). */
  inSenderContext: boolean;
  reverted: boolean;
}

export interface TraceSummary {
  delegatecalls: DelegateCall[];
  /** Calls the destination made itself; 0 for a plain value rejection. */
  topLevelSubcalls: number;
  frames: number;
}

const MAX_FRAMES = 5000;

export function summariseTrace(root: CallFrame, sender: Address): TraceSummary {
  const delegatecalls: DelegateCall[] = [];
  let frames = 0;
  const visit = (f: CallFrame, parent: CallFrame | null, revertedAbove: boolean) => {
    if (++frames > MAX_FRAMES) return;
    const reverted = revertedAbove || !!f.error;
    if ((f.type === 'DELEGATECALL' || f.type === 'CALLCODE') && f.to) {
      const input = (f.input ?? '0x').toLowerCase();
      delegatecalls.push({
        context: getAddress(f.from),
        target: getAddress(f.to),
        selector: size(input as Hex) >= 4 ? slice(input as Hex, 0, 4) : null,
        forwarding: !!parent && same(parent.to, f.from) && (parent.input ?? '0x').toLowerCase() === input,
        selfCall: same(f.from, f.to),
        inSenderContext: same(f.from, sender),
        reverted,
      });
    }
    for (const c of f.calls ?? []) visit(c, f, reverted);
  };
  visit(root, null, false);
  return { delegatecalls, topLevelSubcalls: root.calls?.length ?? 0, frames };
}

/** A 32-byte word in hex: a topic. */
export const WORD = /^0x[0-9a-fA-F]{64}$/;
const HEX = /^0x(?:[0-9a-fA-F]{2})*$/;

/**
 * A log as the node gave it (simulated or traced), checked: an address, 32-byte topics and hex
 * data. Anything else is a node's garbage and throws, which the simulation's caller reports as
 * Base being unreadable (502, nothing charged or recorded), never as a 500.
 */
export function rawLog(l: { address?: unknown; topics?: unknown; data?: unknown }): RawLog {
  const { address, topics, data } = l ?? {};
  if (typeof address !== 'string' || !Array.isArray(topics) || !topics.every((t) => typeof t === 'string' && WORD.test(t)) || typeof data !== 'string' || !HEX.test(data)) {
    throw new Error('the node answered a log that is not one');
  }
  return { address: getAddress(address), topics: topics as Hex[], data: data as Hex };
}

/**
 * Logs and value flows of the frames that took effect, in execution order. A reverted frame's
 * logs and value are undone with it, so they and everything below are skipped. A log's
 * `position` is the number of sub-calls its frame had made before emitting it.
 */
export function traceLogs(root: CallFrame): { logs: RawLog[]; nativeTransfers: NativeTransfer[] } {
  const logs: RawLog[] = [];
  const nativeTransfers: NativeTransfer[] = [];
  const visit = (f: CallFrame) => {
    if (f.error) return;
    const value = f.value ? BigInt(f.value) : 0n;
    if (value > 0n && f.to && f.type !== 'DELEGATECALL' && f.type !== 'STATICCALL') {
      nativeTransfers.push({ from: getAddress(f.from), to: getAddress(f.to), value });
    }
    const calls = f.calls ?? [];
    const own = (f.logs ?? []).map((l) => ({ l, p: l.position === undefined ? 0 : Number(BigInt(l.position)) }));
    for (let i = 0; i <= calls.length; i++) {
      for (const { l, p } of own) {
        if (p === i || (i === calls.length && p > i)) logs.push(rawLog(l));
      }
      const c = calls[i];
      if (c) visit(c);
    }
  };
  visit(root);
  return { logs, nativeTransfers };
}
