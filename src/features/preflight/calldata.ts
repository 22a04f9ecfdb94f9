import { decodeFunctionData, getAddress, parseAbi, size, slice, toFunctionSelector, type Abi, type Address, type Hex } from 'viem';
import { PERMIT2_ADDRESS, same } from './known.js';
import { plain } from './plain.js';

/**
 * Static decoding of unsigned calldata into what it asks tokens to do. This needs no chain:
 * it works even when the simulation cannot run, and it names intent (an approval is not a
 * transfer and leaves no balance change in a simulation, yet it is what drainers ask for).
 */

const TOKEN_ABI = parseAbi([
  'function transfer(address to, uint256 amount)',
  'function transferFrom(address from, address to, uint256 amount)',
  'function approve(address spender, uint256 amount)',
  'function increaseAllowance(address spender, uint256 addedValue)',
  'function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)',
  'function setApprovalForAll(address operator, bool approved)',
  'function safeTransferFrom(address from, address to, uint256 tokenId)',
  'function safeTransferFrom(address from, address to, uint256 tokenId, bytes data)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
]);

const BATCH_ABI = parseAbi([
  'function multicall(bytes[] data)',
  'function multicall(uint256 deadline, bytes[] data)',
  'struct Call { address target; bytes callData; }',
  'struct Call3 { address target; bool allowFailure; bytes callData; }',
  'struct Call3Value { address target; bool allowFailure; uint256 value; bytes callData; }',
  'function aggregate(Call[] calls)',
  'function tryAggregate(bool requireSuccess, Call[] calls)',
  'function aggregate3(Call3[] calls)',
  'function aggregate3Value(Call3Value[] calls)',
]);

const PERMIT2_ABI = parseAbi([
  'struct PermitDetails { address token; uint160 amount; uint48 expiration; uint48 nonce; }',
  'struct PermitSingle { PermitDetails details; address spender; uint256 sigDeadline; }',
  'struct PermitBatch { PermitDetails[] details; address spender; uint256 sigDeadline; }',
  'struct TokenPermissions { address token; uint256 amount; }',
  'struct PermitTransferFrom { TokenPermissions permitted; uint256 nonce; uint256 deadline; }',
  'struct PermitBatchTransferFrom { TokenPermissions[] permitted; uint256 nonce; uint256 deadline; }',
  'struct SignatureTransferDetails { address to; uint256 requestedAmount; }',
  'function approve(address token, address spender, uint160 amount, uint48 expiration)',
  'function permit(address owner, PermitSingle permitSingle, bytes signature)',
  'function permit(address owner, PermitBatch permitBatch, bytes signature)',
  'function permitTransferFrom(PermitTransferFrom permit, SignatureTransferDetails transferDetails, address owner, bytes signature)',
  'function permitBatchTransferFrom(PermitBatchTransferFrom permit, SignatureTransferDetails[] transferDetails, address owner, bytes signature)',
  'function transferFrom(address from, address to, uint160 amount, address token)',
]);

export interface DecodedCall {
  /** Position in the batch tree: "0" is the transaction itself, "0.2" its third inner call. */
  path: string;
  target: Address;
  /** msg.sender of this call; null when the transaction has no sender yet. */
  caller: Address | null;
  selector: Hex | null;
  /** Canonical signature, e.g. "approve(address,uint256)"; null when not recognised. */
  function: string | null;
  args: Record<string, unknown> | null;
}

export type TokenAction =
  | { kind: 'approve'; path: string; token: Address; owner: Address | null; spender: Address; amount: bigint; via: string; deadline: bigint | null }
  | { kind: 'approve-all'; path: string; token: Address; owner: Address | null; operator: Address; approved: boolean; via: string }
  | { kind: 'transfer'; path: string; token: Address; from: Address | null; to: Address; amount: bigint; via: string };

/** Whom the action pays or empowers: the recipient, the spender or the operator. */
export const counterpartyOf = (x: TokenAction): Address => (x.kind === 'approve' ? x.spender : x.kind === 'approve-all' ? x.operator : x.to);

export interface CalldataDecoding {
  calls: DecodedCall[];
  actions: TokenAction[];
}

const MAX_DEPTH = 4;
const MAX_CALLS = 64;

type Args = Record<string, any>;

export function decodeCalldata(to: Address, data: Hex, sender: Address | null): CalldataDecoding {
  const out: CalldataDecoding = { calls: [], actions: [] };
  walk(out, getAddress(to), data.toLowerCase() as Hex, sender, '0', 0);
  return out;
}

type AbiFunction = Extract<Abi[number], { type: 'function' }>;

/** Selector -> function, per ABI: overloads (permit single/batch) share a name and arity. */
function bySelector(abi: Abi): Map<Hex, AbiFunction> {
  const m = new Map<Hex, AbiFunction>();
  for (const item of abi) if (item.type === 'function') m.set(toFunctionSelector(item), item);
  return m;
}
const TOKEN = bySelector(TOKEN_ABI);
const BATCH = bySelector(BATCH_ABI);
const PERMIT2 = bySelector(PERMIT2_ABI);

function decodeWith(table: Map<Hex, AbiFunction>, selector: Hex, data: Hex): { fn: string; name: string; args: Args } | null {
  const item = table.get(selector);
  if (!item) return null;
  try {
    const d = decodeFunctionData({ abi: [item], data });
    // Arguments holding more bytes than the calldata itself read the same bytes more than once:
    // offsets sharing one tail, which no ABI encoder writes. Thirty elements of a bytes[] pointing
    // at one tail, nested, made 59 KB of input decode for 10 s into a 93 MB report (stored, and
    // sent back). Refused as malformed arguments; each level of a batch then holds at most the
    // bytes of the level above, so a whole decoding stays within MAX_DEPTH + 1 times its input.
    if (bytesIn(d.args) > size(data)) return null;
    const args: Args = {};
    item.inputs.forEach((p, i) => (args[p.name || String(i)] = (d.args as readonly unknown[])[i]));
    const fn = `${item.name}(${item.inputs.map((p) => canonicalType(p)).join(',')})`;
    return { fn, name: item.name, args };
  } catch {
    return null;
  }
}

/** The bytes that decoded hex values (bytes, bytesN, addresses) hold, in arrays and tuples too. */
function bytesIn(value: unknown): number {
  if (typeof value === 'string') return value.startsWith('0x') ? (value.length - 2) / 2 : value.length;
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + bytesIn(v), 0);
  if (value && typeof value === 'object') return Object.values(value).reduce((n: number, v) => n + bytesIn(v), 0);
  return 0;
}

function canonicalType(p: { type: string; components?: readonly { type: string }[] }): string {
  if (!p.type.startsWith('tuple')) return p.type;
  return `(${(p.components ?? []).map((c) => canonicalType(c)).join(',')})${p.type.slice(5)}`;
}

function walk(out: CalldataDecoding, target: Address, data: Hex, caller: Address | null, path: string, depth: number): void {
  if (out.calls.length >= MAX_CALLS) return;
  const selector = size(data) >= 4 ? slice(data, 0, 4) : null;
  const call: DecodedCall = { path, target, caller, selector, function: null, args: null };
  out.calls.push(call);
  if (!selector) return;
  const isPermit2 = same(target, PERMIT2_ADDRESS);
  const d = (isPermit2 ? decodeWith(PERMIT2, selector, data) : null) ?? decodeWith(BATCH, selector, data) ?? (isPermit2 ? null : decodeWith(TOKEN, selector, data));
  if (!d) return;
  call.function = d.fn;
  call.args = plain(d.args) as Record<string, unknown>;
  const via = d.fn;
  const a = d.args;
  const act = (x: TokenAction): void => void out.actions.push(x);

  if (d.name === 'multicall' || d.name.startsWith('aggregate') || d.name === 'tryAggregate') {
    if (depth >= MAX_DEPTH) return;
    // multicall(bytes[]) delegatecalls into itself (msg.sender is kept); Multicall3 calls out
    // (msg.sender becomes the Multicall3 contract, so approvals there are Multicall3's own).
    const inner: { target: Address; data: Hex; caller: Address | null }[] =
      d.name === 'multicall'
        ? (a.data as Hex[]).map((x) => ({ target, data: x, caller }))
        : (a.calls as { target: Address; callData: Hex }[]).map((c) => ({ target: getAddress(c.target), data: c.callData, caller: target }));
    inner.forEach((c, i) => walk(out, c.target, c.data.toLowerCase() as Hex, c.caller, `${path}.${i}`, depth + 1));
    return;
  }
  if (isPermit2) return permit2Actions(d.name, a, caller, path, via, act);
  switch (d.name) {
    case 'transfer':
      return act({ kind: 'transfer', path, token: target, from: caller, to: a.to, amount: a.amount, via });
    case 'transferFrom':
    case 'safeTransferFrom':
      return act({ kind: 'transfer', path, token: target, from: a.from, to: a.to, amount: a.amount ?? a.tokenId, via });
    case 'transferWithAuthorization':
      return act({ kind: 'transfer', path, token: target, from: a.from, to: a.to, amount: a.value, via });
    case 'approve':
      return act({ kind: 'approve', path, token: target, owner: caller, spender: a.spender, amount: a.amount, via, deadline: null });
    case 'increaseAllowance':
      return act({ kind: 'approve', path, token: target, owner: caller, spender: a.spender, amount: a.addedValue, via, deadline: null });
    case 'permit':
      return act({ kind: 'approve', path, token: target, owner: a.owner, spender: a.spender, amount: a.value, via, deadline: a.deadline });
    case 'setApprovalForAll':
      return act({ kind: 'approve-all', path, token: target, owner: caller, operator: a.operator, approved: a.approved, via });
  }
}

type Details = { token: Address; amount: bigint; expiration: number };

function permit2Actions(name: string, a: Args, caller: Address | null, path: string, via: string, act: (x: TokenAction) => void): void {
  if (name === 'approve') {
    act({ kind: 'approve', path, token: a.token, owner: caller, spender: a.spender, amount: a.amount, via, deadline: BigInt(a.expiration) });
  } else if (name === 'permit') {
    const p = (a.permitSingle ?? a.permitBatch) as { details: Details | Details[]; spender: Address; sigDeadline: bigint };
    for (const det of Array.isArray(p.details) ? p.details : [p.details]) {
      act({ kind: 'approve', path, token: det.token, owner: a.owner, spender: p.spender, amount: det.amount, via, deadline: p.sigDeadline });
    }
  } else if (name === 'permitTransferFrom' || name === 'permitBatchTransferFrom') {
    const permitted = ([] as { token: Address }[]).concat(a.permit.permitted);
    const details = ([] as { to: Address; requestedAmount: bigint }[]).concat(a.transferDetails);
    details.forEach((t, i) => {
      const token = permitted[i]?.token;
      if (token) act({ kind: 'transfer', path, token, from: a.owner, to: t.to, amount: t.requestedAmount, via });
    });
  } else if (name === 'transferFrom') {
    act({ kind: 'transfer', path, token: a.token, from: a.from, to: a.to, amount: a.amount, via });
  }
}
