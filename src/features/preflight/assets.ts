import { decodeEventLog, formatUnits, getAddress, parseAbi, size, type Address, type Hex } from 'viem';
import { tokenDecimals } from '../../platform/token-metadata.js';
import { NATIVE_TOKEN, PERMIT2_ADDRESS, WETH_ADDRESS, ZERO_ADDRESS, same, type TokenMeta } from './known.js';
import { plain } from './plain.js';
import type { TokenAction } from './calldata.js';
import { topicAddress, type NativeTransfer, type RawLog } from './simulate.js';

/**
 * What the simulated transaction moves, read from its logs (ERC-20 and ERC-721 Transfer, WETH
 * Deposit/Withdrawal, which WETH9 emits instead of Transfer) and from native value flows.
 */

export interface AssetMovement {
  standard: 'native' | 'erc20' | 'erc721';
  token: Address;
  from: Address;
  to: Address;
  /** Base units; 1 for an NFT. */
  amount: bigint;
  tokenId: bigint | null;
}

const TRANSFER = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';
const WETH_DEPOSIT = '0xe1fffcc4923d04b559f4d29a8bfc6cda04eb5b0d3c460751c2402c5c5cc9109c';
const WETH_WITHDRAWAL = '0x7fcf532c15f0a6db0bd6d0e038bea71d30d808c7d98cb3bf7268a95bf5081b65';

export function movementsOf(logs: RawLog[], native: NativeTransfer[]): AssetMovement[] {
  const out: AssetMovement[] = native.map((t) => ({ standard: 'native', token: NATIVE_TOKEN, from: t.from, to: t.to, amount: t.value, tokenId: null }));
  for (const l of logs) {
    const t0 = l.topics[0]?.toLowerCase();
    if (t0 === TRANSFER && l.topics.length === 3 && size(l.data) === 32) {
      out.push({ standard: 'erc20', token: l.address, from: topicAddress(l.topics[1]!), to: topicAddress(l.topics[2]!), amount: BigInt(l.data), tokenId: null });
    } else if (t0 === TRANSFER && l.topics.length === 4) {
      out.push({ standard: 'erc721', token: l.address, from: topicAddress(l.topics[1]!), to: topicAddress(l.topics[2]!), amount: 1n, tokenId: BigInt(l.topics[3]!) });
    } else if (same(l.address, WETH_ADDRESS) && l.topics.length === 2 && size(l.data) === 32 && (t0 === WETH_DEPOSIT || t0 === WETH_WITHDRAWAL)) {
      const who = topicAddress(l.topics[1]!);
      const [from, to] = t0 === WETH_DEPOSIT ? [ZERO_ADDRESS, who] : [who, ZERO_ADDRESS];
      out.push({ standard: 'erc20', token: l.address, from, to, amount: BigInt(l.data), tokenId: null });
    }
  }
  return out;
}

const APPROVAL = '0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925';
const APPROVAL_FOR_ALL = '0x17307eab39ab6107e8899845ad3d59bd9653f200f220920489ca2b5937696c31';
/** Permit2's Approval(owner, token, spender, uint160 amount, uint48 expiration) and Permit(…, uint48 nonce). */
const PERMIT2_APPROVAL = '0xda9fa7c1b00402c17d0161b249b1ab8bbec047c5a52207b9c112deffd817036b';
const PERMIT2_PERMIT = '0xc6a377bfc4eb120024a8ac08eef205be16b817020812c73223e81d1bdb9708ec';

/**
 * Allowances the simulated transaction grants on the sender's assets, read from its logs: what
 * the calldata decoder cannot see when the approval runs inside a call it cannot decode (a smart
 * wallet's execute, a 7702 batch, a router). ERC-20 `Approval` (3 topics, one value word),
 * `ApprovalForAll`, and Permit2's `Approval` and `Permit` (the token in a topic). Path `log:<i>`.
 */
export function approvalsOf(logs: RawLog[], sender: Address): TokenAction[] {
  const out: TokenAction[] = [];
  logs.forEach((l, i) => {
    const t0 = l.topics[0]?.toLowerCase();
    const path = `log:${i}`;
    if ((t0 === APPROVAL || t0 === APPROVAL_FOR_ALL) && l.topics.length === 3 && size(l.data) === 32) {
      const owner = topicAddress(l.topics[1]!);
      if (!same(owner, sender)) return;
      const who = topicAddress(l.topics[2]!);
      const word = BigInt(l.data);
      if (t0 === APPROVAL) out.push({ kind: 'approve', path, token: getAddress(l.address), owner, spender: who, amount: word, via: 'log:Approval', deadline: null });
      else out.push({ kind: 'approve-all', path, token: getAddress(l.address), owner, operator: who, approved: word !== 0n, via: 'log:ApprovalForAll' });
    } else if (same(l.address, PERMIT2_ADDRESS) && (t0 === PERMIT2_APPROVAL || t0 === PERMIT2_PERMIT) && l.topics.length === 4 && size(l.data) >= 64) {
      const owner = topicAddress(l.topics[1]!);
      if (!same(owner, sender)) return;
      const amount = BigInt(`0x${l.data.slice(2, 66)}`);
      out.push({ kind: 'approve', path, token: topicAddress(l.topics[2]!), owner, spender: topicAddress(l.topics[3]!), amount, via: `log:permit2.${t0 === PERMIT2_APPROVAL ? 'approve' : 'permit'}`, deadline: null });
    }
  });
  return out;
}

export interface AssetChange {
  standard: 'native' | 'erc20' | 'erc721';
  token: Address;
  symbol: string | null;
  decimals: number | null;
  from: Address;
  to: Address;
  amount: string;
  rawAmount: string;
  tokenId?: string;
}

/** Amount in the token's units; raw base units when the token's decimals are unknown. */
export function assetChanges(moves: AssetMovement[], tokens: Map<string, TokenMeta>): AssetChange[] {
  return moves.map((m) => {
    const meta = tokens.get(m.token.toLowerCase());
    const decimals = m.standard === 'erc721' ? 0 : tokenDecimals(meta?.decimals);
    return {
      standard: m.standard,
      token: m.token,
      symbol: meta?.symbol ?? null,
      decimals,
      from: m.from,
      to: m.to,
      amount: decimals === null ? m.amount.toString() : formatUnits(m.amount, decimals),
      rawAmount: m.amount.toString(),
      ...(m.tokenId !== null ? { tokenId: m.tokenId.toString() } : {}),
    };
  });
}

/** Net effect per address and token (fungible only), e.g. the sender's "-100 USDC, +0.03 WETH". */
export function balanceChanges(moves: AssetMovement[], tokens: Map<string, TokenMeta>): { address: Address; token: Address; symbol: string | null; delta: string }[] {
  const net = new Map<string, { address: Address; token: Address; delta: bigint }>();
  const add = (address: Address, token: Address, d: bigint) => {
    const k = `${address.toLowerCase()}|${token.toLowerCase()}`;
    const cur = net.get(k) ?? { address, token, delta: 0n };
    cur.delta += d;
    net.set(k, cur);
  };
  for (const m of moves) {
    if (m.standard === 'erc721') continue;
    add(m.from, m.token, -m.amount);
    add(m.to, m.token, m.amount);
  }
  return [...net.values()]
    .filter((x) => x.delta !== 0n && !same(x.address, ZERO_ADDRESS))
    .map((x) => {
      const meta = tokens.get(x.token.toLowerCase());
      const abs = x.delta < 0n ? -x.delta : x.delta;
      const decimals = tokenDecimals(meta?.decimals);
      const shown = decimals !== null ? formatUnits(abs, decimals) : abs.toString();
      return { address: x.address, token: x.token, symbol: meta?.symbol ?? null, delta: `${x.delta < 0n ? '-' : ''}${shown}` };
    });
}

const EVENTS = parseAbi([
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event Approval(address indexed owner, address indexed spender, uint256 value)',
  'event ApprovalForAll(address indexed owner, address indexed operator, bool approved)',
  'event Deposit(address indexed dst, uint256 wad)',
  'event Withdrawal(address indexed src, uint256 wad)',
  'event Swap(address indexed sender, uint256 amount0In, uint256 amount1In, uint256 amount0Out, uint256 amount1Out, address indexed to)',
  'event Sync(uint112 reserve0, uint112 reserve1)',
  'event Mint(address indexed sender, uint256 amount0, uint256 amount1)',
  'event Burn(address indexed sender, uint256 amount0, uint256 amount1, address indexed to)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event OwnershipTransferred(address indexed previousOwner, address indexed newOwner)',
]);
const NFT_EVENTS = parseAbi([
  'event Transfer(address indexed from, address indexed to, uint256 indexed tokenId)',
  'event Approval(address indexed owner, address indexed approved, uint256 indexed tokenId)',
]);
// Permit2's events share names with the token events but not their signatures.
const PERMIT2_EVENTS = parseAbi([
  'event Approval(address indexed owner, address indexed token, address indexed spender, uint160 amount, uint48 expiration)',
  'event Permit(address indexed owner, address indexed token, address indexed spender, uint160 amount, uint48 expiration, uint48 nonce)',
]);

export interface DecodedLog {
  address: Address;
  event: string | null;
  args: Record<string, unknown> | null;
  topics?: Hex[];
  data?: Hex;
}

export function decodeLogs(logs: RawLog[]): DecodedLog[] {
  return logs.map((l) => {
    for (const abi of [EVENTS, NFT_EVENTS, PERMIT2_EVENTS]) {
      try {
        const d = decodeEventLog({ abi, topics: l.topics as [Hex, ...Hex[]], data: l.data, strict: true });
        return { address: getAddress(l.address), event: d.eventName, args: plain(d.args) as Record<string, unknown> };
      } catch {
        /* try the next shape */
      }
    }
    return { address: getAddress(l.address), event: null, args: null, topics: l.topics, data: l.data };
  });
}
