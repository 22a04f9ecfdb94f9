import { decodeAbiParameters, decodeFunctionResult, encodeFunctionData, getAddress, hexToString, parseAbi, size, trim, type Address, type Hex } from 'viem';
import type { ChainClient } from '../../platform/chain.js';
import { tokenText } from '../../platform/token-metadata.js';

/**
 * The few RPC shapes the token-risk collector needs, each one JSON-RPC request: a Multicall3
 * aggregate3 of many reads, a storage read of many slots, and eth_getCode. `RpcMeter` counts
 * requests and sequential rounds, so the report's cost is measured rather than guessed.
 */

export const MULTICALL3: Address = '0xcA11bde05977b3631167028862bE2a173976CA11';

const multicallAbi = parseAbi([
  'struct Call3 { address target; bool allowFailure; bytes callData; }',
  'struct Result { bool success; bytes returnData; }',
  'function aggregate3(Call3[] calls) payable returns (Result[] returnData)',
  'function getBlockNumber() view returns (uint256)',
  'function getCurrentBlockTimestamp() view returns (uint256)',
]);

export interface RpcMeter {
  requests: number;
  rounds: number;
}

export const newMeter = (): RpcMeter => ({ requests: 0, rounds: 0 });

/** Counts one JSON-RPC request (rounds are counted by whoever sequences them). */
export function track<T>(meter: RpcMeter, request: Promise<T>): Promise<T> {
  meter.requests += 1;
  return request;
}

export interface Read {
  target: Address;
  data: Hex;
}

export interface ReadResult {
  success: boolean;
  data: Hex;
}

export const read = (target: Address, abi: readonly unknown[], functionName: string, args: readonly unknown[] = []): Read => ({
  target,
  data: encodeFunctionData({ abi, functionName, args } as Parameters<typeof encodeFunctionData>[0]),
});

export const blockNumberRead = (): Read => read(MULTICALL3, multicallAbi, 'getBlockNumber');
export const timestampRead = (): Read => read(MULTICALL3, multicallAbi, 'getCurrentBlockTimestamp');

/** Many reads in one eth_call; a read that reverts is `success: false`, never a thrown error. */
export async function aggregate(chain: ChainClient, reads: Read[], blockNumber?: bigint): Promise<ReadResult[]> {
  const data = encodeFunctionData({
    abi: multicallAbi,
    functionName: 'aggregate3',
    args: [reads.map((r) => ({ target: r.target, allowFailure: true, callData: r.data }))],
  });
  const res = await chain.call({ to: MULTICALL3, data, ...(blockNumber !== undefined ? { blockNumber } : {}) });
  const out = decodeFunctionResult({ abi: multicallAbi, functionName: 'aggregate3', data: res.data ?? '0x' });
  return out.map((r) => ({ success: r.success, data: r.returnData }));
}

/** aggregate over named reads: one eth_call, each result under its read's name. */
export async function aggregateNamed<K extends string>(chain: ChainClient, reads: Record<K, Read>, blockNumber?: bigint): Promise<Record<K, ReadResult>> {
  const keys = Object.keys(reads) as K[];
  const results = await aggregate(chain, keys.map((k) => reads[k]), blockNumber);
  return Object.fromEntries(keys.map((k, i) => [k, results[i]!])) as Record<K, ReadResult>;
}

/**
 * Reads storage slots of `address` in one eth_call: for that call only, the account's code is
 * replaced (state override) by a 26-byte reader that returns sload(word) for every 32-byte word
 * of calldata. The storage read is the account's own; its code is never executed.
 *
 *   PUSH1 0; loop: JUMPDEST CALLDATASIZE DUP2 LT ISZERO PUSH1 end JUMPI
 *   DUP1 CALLDATALOAD SLOAD DUP2 MSTORE PUSH1 32 ADD PUSH1 loop JUMP
 *   end: JUMPDEST CALLDATASIZE PUSH1 0 RETURN
 */
export const SLOT_READER: Hex = '0x60005b3681101560155780355481526020016002565b366000f3';

export async function readSlots(chain: ChainClient, address: Address, slots: Hex[], blockNumber?: bigint): Promise<Hex[]> {
  const data = `0x${slots.map((s) => s.slice(2).padStart(64, '0')).join('')}` as Hex;
  const res = await chain.call({
    to: address,
    data,
    stateOverride: [{ address, code: SLOT_READER }],
    ...(blockNumber !== undefined ? { blockNumber } : {}),
  });
  const out = res.data ?? '0x';
  return slots.map((_, i) => `0x${out.slice(2 + i * 64, 2 + (i + 1) * 64).padEnd(64, '0')}` as Hex);
}

// ---- decoding of single results: null means "did not answer as the function should" ----

const WORD = 32;

export function asUint(r: ReadResult | undefined): bigint | null {
  if (!r?.success || size(r.data) < WORD) return null;
  return BigInt(r.data.slice(0, 66));
}

/** An address-shaped word (upper 12 bytes zero); `malformed` when something else answered. */
export function asAddress(r: ReadResult | undefined): { value: Address | null; malformed: boolean } {
  if (!r?.success || size(r.data) === 0) return { value: null, malformed: false };
  if (size(r.data) < WORD || !/^0x0{24}/.test(r.data)) return { value: null, malformed: true };
  return { value: getAddress(`0x${r.data.slice(26, 66)}`), malformed: false };
}

export function asBool(r: ReadResult | undefined): boolean | null {
  const v = asUint(r);
  return v === null || v > 1n ? null : v === 1n;
}

/** ABI string (control, bidi and invisible characters dropped), or a bytes32 right-padded printable-ASCII string (old tokens such as MKR). */
export function asString(r: ReadResult | undefined): string | null {
  if (!r?.success || size(r.data) === 0) return null;
  try {
    const [s] = decodeAbiParameters([{ type: 'string' }], r.data);
    return tokenText(s);
  } catch {
    if (size(r.data) !== WORD) return null;
    const s = hexToString(trim(r.data, { dir: 'right' })).replace(/\0/g, '');
    return /^[\x20-\x7e]+$/.test(s) ? s : null;
  }
}

/** The address in a storage word, or null when the word is zero. */
export function slotAddress(word: Hex): Address | null {
  const v = BigInt(word);
  if (v === 0n || v >> 160n !== 0n) return null;
  return getAddress(`0x${word.slice(-40)}`);
}
