import { describe, expect, it } from 'vitest';
import { encodeFunctionData, maxUint160, maxUint256, parseAbi, type Address, type Hex } from 'viem';
import { decodeCalldata } from '../../src/features/preflight/calldata.js';
import { MULTICALL3_ADDRESS, PERMIT2_ADDRESS, USDC } from '../../src/features/preflight/known.js';

const SENDER: Address = '0x1111111111111111111111111111111111111111';
const BOB: Address = '0x2222222222222222222222222222222222222222';
const TOKEN: Address = '0x3333333333333333333333333333333333333333';
const NFT: Address = '0x4444444444444444444444444444444444444444';

const abi = parseAbi([
  'function transfer(address to, uint256 amount)',
  'function transferFrom(address from, address to, uint256 amount)',
  'function approve(address spender, uint256 amount)',
  'function increaseAllowance(address spender, uint256 addedValue)',
  'function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)',
  'function setApprovalForAll(address operator, bool approved)',
  'function safeTransferFrom(address from, address to, uint256 tokenId)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function multicall(bytes[] data)',
  'function multicall(uint256 deadline, bytes[] data)',
  'struct Call3 { address target; bool allowFailure; bytes callData; }',
  'function aggregate3(Call3[] calls)',
  'struct Call { address target; bytes callData; }',
  'function aggregate(Call[] calls)',
]);
const permit2 = parseAbi([
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
const enc = (functionName: string, args: unknown[]) => encodeFunctionData({ abi, functionName, args } as never) as Hex;
const enc2 = (functionName: string, args: unknown[]) => encodeFunctionData({ abi: permit2, functionName, args } as never) as Hex;
const ZERO32 = `0x${'00'.repeat(32)}` as Hex;

describe('ERC-20, ERC-2612, EIP-3009 and ERC-721 calls', () => {
  it('decodes transfer into a transfer from the sender', () => {
    const d = decodeCalldata(USDC, enc('transfer', [BOB, 1_500_000n]), SENDER);
    expect(d.calls).toEqual([{ path: '0', target: USDC, caller: SENDER, selector: '0xa9059cbb', function: 'transfer(address,uint256)', args: { to: BOB, amount: '1500000' } }]);
    expect(d.actions).toEqual([{ kind: 'transfer', path: '0', token: USDC, from: SENDER, to: BOB, amount: 1_500_000n, via: 'transfer(address,uint256)' }]);
  });

  it('decodes transferFrom, safeTransferFrom and transferWithAuthorization with their own from', () => {
    expect(decodeCalldata(TOKEN, enc('transferFrom', [BOB, SENDER, 5n]), SENDER).actions).toMatchObject([{ kind: 'transfer', from: BOB, to: SENDER, amount: 5n }]);
    expect(decodeCalldata(NFT, enc('safeTransferFrom', [SENDER, BOB, 7n]), SENDER).actions).toMatchObject([{ kind: 'transfer', token: NFT, from: SENDER, to: BOB, amount: 7n }]);
    const auth = enc('transferWithAuthorization', [BOB, SENDER, 9n, 0n, 1n, ZERO32, 27, ZERO32, ZERO32]);
    expect(decodeCalldata(USDC, auth, TOKEN).actions).toMatchObject([{ kind: 'transfer', token: USDC, from: BOB, to: SENDER, amount: 9n }]);
  });

  it('decodes approve, increaseAllowance and permit into approvals', () => {
    expect(decodeCalldata(TOKEN, enc('approve', [BOB, maxUint256]), SENDER).actions).toEqual([
      { kind: 'approve', path: '0', token: TOKEN, owner: SENDER, spender: BOB, amount: maxUint256, via: 'approve(address,uint256)', deadline: null },
    ]);
    expect(decodeCalldata(TOKEN, enc('increaseAllowance', [BOB, 3n]), SENDER).actions).toMatchObject([{ kind: 'approve', spender: BOB, amount: 3n, via: 'increaseAllowance(address,uint256)' }]);
    const permit = enc('permit', [SENDER, BOB, 10n, 1234n, 27, ZERO32, ZERO32]);
    // Anyone may submit a permit: the owner is in the signature, not msg.sender.
    expect(decodeCalldata(USDC, permit, TOKEN).actions).toMatchObject([{ kind: 'approve', owner: SENDER, spender: BOB, amount: 10n, deadline: 1234n }]);
  });

  it('decodes setApprovalForAll', () => {
    expect(decodeCalldata(NFT, enc('setApprovalForAll', [BOB, true]), SENDER).actions).toEqual([
      { kind: 'approve-all', path: '0', token: NFT, owner: SENDER, operator: BOB, approved: true, via: 'setApprovalForAll(address,bool)' },
    ]);
  });

  it('keeps unknown selectors, short data and malformed arguments as undecoded calls', () => {
    expect(decodeCalldata(TOKEN, '0xdeadbeef00', SENDER)).toEqual({ calls: [{ path: '0', target: TOKEN, caller: SENDER, selector: '0xdeadbeef', function: null, args: null }], actions: [] });
    expect(decodeCalldata(TOKEN, '0x', SENDER).calls[0]).toMatchObject({ selector: null, function: null });
    expect(decodeCalldata(TOKEN, '0xa9059c', SENDER).calls[0]).toMatchObject({ selector: null });
    expect(decodeCalldata(TOKEN, '0xa9059cbb1234', SENDER)).toMatchObject({ calls: [{ selector: '0xa9059cbb', function: null }], actions: [] });
  });

  it('accepts upper-case calldata', () => {
    const data = enc('transfer', [BOB, 1n]).toUpperCase().replace('0X', '0x') as Hex;
    expect(decodeCalldata(TOKEN, data, SENDER).actions).toHaveLength(1);
  });
});

describe('Permit2 at its canonical address', () => {
  const details = (token: Address, amount: bigint) => ({ token, amount, expiration: 99, nonce: 0 });
  it('decodes approve with the token from the arguments', () => {
    const d = decodeCalldata(PERMIT2_ADDRESS, enc2('approve', [USDC, BOB, maxUint160, 99]), SENDER);
    expect(d.actions).toEqual([{ kind: 'approve', path: '0', token: USDC, owner: SENDER, spender: BOB, amount: maxUint160, via: 'approve(address,address,uint160,uint48)', deadline: 99n }]);
  });

  it('decodes permit single and permit batch into one approval per token', () => {
    const single = enc2('permit', [SENDER, { details: details(USDC, 5n), spender: BOB, sigDeadline: 7n }, '0x']);
    expect(decodeCalldata(PERMIT2_ADDRESS, single, TOKEN).actions).toMatchObject([{ kind: 'approve', token: USDC, owner: SENDER, spender: BOB, amount: 5n, deadline: 7n }]);
    const batch = enc2('permit', [SENDER, { details: [details(USDC, 5n), details(TOKEN, maxUint160)], spender: BOB, sigDeadline: 7n }, '0x']);
    const d = decodeCalldata(PERMIT2_ADDRESS, batch, TOKEN);
    expect(d.calls[0]!.function).toBe('permit(address,((address,uint160,uint48,uint48)[],address,uint256),bytes)');
    expect(d.actions).toMatchObject([{ token: USDC, amount: 5n }, { token: TOKEN, amount: maxUint160, spender: BOB }]);
  });

  it('decodes permitTransferFrom, permitBatchTransferFrom and transferFrom into transfers from the owner', () => {
    const one = enc2('permitTransferFrom', [{ permitted: { token: USDC, amount: 10n }, nonce: 1n, deadline: 2n }, { to: BOB, requestedAmount: 8n }, SENDER, '0x']);
    expect(decodeCalldata(PERMIT2_ADDRESS, one, TOKEN).actions).toMatchObject([{ kind: 'transfer', token: USDC, from: SENDER, to: BOB, amount: 8n }]);
    const many = enc2('permitBatchTransferFrom', [
      { permitted: [{ token: USDC, amount: 10n }, { token: TOKEN, amount: 3n }], nonce: 1n, deadline: 2n },
      [{ to: BOB, requestedAmount: 8n }, { to: SENDER, requestedAmount: 3n }],
      SENDER,
      '0x',
    ]);
    expect(decodeCalldata(PERMIT2_ADDRESS, many, TOKEN).actions).toMatchObject([{ token: USDC, to: BOB, amount: 8n }, { token: TOKEN, to: SENDER, amount: 3n }]);
    expect(decodeCalldata(PERMIT2_ADDRESS, enc2('transferFrom', [SENDER, BOB, 4n, USDC]), TOKEN).actions).toMatchObject([{ kind: 'transfer', token: USDC, from: SENDER, to: BOB, amount: 4n }]);
  });

  it('reads Permit2-shaped calldata elsewhere as nothing in particular', () => {
    expect(decodeCalldata(TOKEN, enc2('approve', [USDC, BOB, 1n, 1]), SENDER)).toMatchObject({ calls: [{ function: null }], actions: [] });
  });
});

describe('batches, recursively', () => {
  it('multicall(bytes[]) keeps msg.sender and the target', () => {
    const d = decodeCalldata(TOKEN, enc('multicall', [[enc('approve', [BOB, 1n]), enc('transfer', [BOB, 2n])]]), SENDER);
    expect(d.calls.map((c) => [c.path, c.target, c.caller, c.function])).toEqual([
      ['0', TOKEN, SENDER, 'multicall(bytes[])'],
      ['0.0', TOKEN, SENDER, 'approve(address,uint256)'],
      ['0.1', TOKEN, SENDER, 'transfer(address,uint256)'],
    ]);
    expect(d.actions.map((a) => [a.kind, a.path])).toEqual([['approve', '0.0'], ['transfer', '0.1']]);
    expect(decodeCalldata(TOKEN, enc('multicall', [5n, [enc('transfer', [BOB, 2n])]]), SENDER).actions).toMatchObject([{ kind: 'transfer', path: '0.0', from: SENDER }]);
  });

  it('Multicall3 aggregate3 calls out: the inner caller is the Multicall3 contract', () => {
    const inner = enc('multicall', [[enc('approve', [BOB, maxUint256])]]);
    const data = enc('aggregate3', [[{ target: USDC, allowFailure: false, callData: enc('transfer', [BOB, 1n]) }, { target: TOKEN, allowFailure: true, callData: inner }]]);
    const d = decodeCalldata(MULTICALL3_ADDRESS, data, SENDER);
    expect(d.calls.map((c) => [c.path, c.target, c.caller])).toEqual([
      ['0', MULTICALL3_ADDRESS, SENDER],
      ['0.0', USDC, MULTICALL3_ADDRESS],
      ['0.1', TOKEN, MULTICALL3_ADDRESS],
      ['0.1.0', TOKEN, MULTICALL3_ADDRESS],
    ]);
    expect(d.actions).toMatchObject([
      { kind: 'transfer', path: '0.0', token: USDC, from: MULTICALL3_ADDRESS, to: BOB },
      { kind: 'approve', path: '0.1.0', token: TOKEN, owner: MULTICALL3_ADDRESS, spender: BOB, amount: maxUint256 },
    ]);
    expect(decodeCalldata(MULTICALL3_ADDRESS, enc('aggregate', [[{ target: USDC, callData: enc('approve', [BOB, 1n]) }]]), SENDER).actions).toMatchObject([{ kind: 'approve', path: '0.0' }]);
  });

  it('stops at depth 4 and at 64 calls', () => {
    let data = enc('transfer', [BOB, 1n]);
    for (let i = 0; i < 6; i++) data = enc('multicall', [[data]]);
    const deep = decodeCalldata(TOKEN, data, SENDER);
    expect(deep.calls).toHaveLength(5);
    expect(deep.actions).toEqual([]);
    const wide = decodeCalldata(TOKEN, enc('multicall', [Array.from({ length: 100 }, () => enc('transfer', [BOB, 1n]))]), SENDER);
    expect(wide.calls).toHaveLength(64);
  });

  it('refuses a batch whose elements share one tail: 60000 hex digits never decode to megabytes', () => {
    const word = (n: number) => n.toString(16).padStart(64, '0');
    /** multicall(bytes[]) of `copies` elements whose offsets all point at one tail holding `inner`. */
    const sharing = (inner: Hex, copies: number): Hex => {
      const bytes = inner.slice(2);
      return `0xac9650d8${word(32)}${word(copies)}${word(32 * copies).repeat(copies)}${word(bytes.length / 2)}${bytes.padEnd(Math.ceil(bytes.length / 64) * 64, '0')}` as Hex;
    };
    // A transfer padded to 24 KB, wrapped five times in 30 copies of itself: about 29 KB of calldata.
    let data = `${enc('transfer', [BOB, 1n])}${'00'.repeat(24_000)}` as Hex;
    for (let i = 0; i < 5; i++) data = sharing(data, 30);
    expect(data.length).toBeLessThanOrEqual(60_002);
    const d = decodeCalldata(TOKEN, data, SENDER);
    expect(JSON.stringify(d.calls).length).toBeLessThan(2 * data.length);
    expect(d.calls).toEqual([{ path: '0', target: TOKEN, caller: SENDER, selector: '0xac9650d8', function: null, args: null }]);
    // The same elements, each with a tail of its own, decode as before.
    const own = decodeCalldata(TOKEN, enc('multicall', [[enc('transfer', [BOB, 1n]), enc('transfer', [BOB, 1n])]]), SENDER);
    expect(own.calls.map((c) => c.function)).toEqual(['multicall(bytes[])', 'transfer(address,uint256)', 'transfer(address,uint256)']);
  });
});
