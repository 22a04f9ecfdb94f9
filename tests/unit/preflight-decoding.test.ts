import { describe, expect, it } from 'vitest';
import {
  concat,
  encodeAbiParameters,
  encodeErrorResult,
  encodeFunctionResult,
  pad,
  parseAbi,
  stringToHex,
  toEventSelector,
  toHex,
  type Address,
  type Hex,
} from 'viem';
import { assetChanges, balanceChanges, decodeLogs, movementsOf } from '../../src/features/preflight/assets.js';
import { contextCall, decodeContext, PROBE_ADDRESS, PROBE_CODE } from '../../src/features/preflight/context.js';
import { NATIVE_TOKEN, STATIC_TOKENS, USDC, WETH_ADDRESS, isBurnAddress, isPrecompile, knownAs } from '../../src/features/preflight/known.js';
import { normalisePreflightInput, preflightInputDigest } from '../../src/features/preflight/preflight.js';
import { decodeRevert } from '../../src/features/preflight/revert.js';
import { summariseTrace, traceLogs, type CallFrame } from '../../src/features/preflight/trace.js';
import { digestOf } from '../../src/platform/canonical.js';

const A: Address = '0x1111111111111111111111111111111111111111';
const B: Address = '0x2222222222222222222222222222222222222222';
const T: Address = '0x3333333333333333333333333333333333333333';
const topic = (a: Address) => pad(a.toLowerCase() as Hex);
const TRANSFER = toEventSelector('Transfer(address,address,uint256)');

describe('revert data', () => {
  const errors = parseAbi(['error Error(string)', 'error Panic(uint256)', 'error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)', 'error VaultLocked(uint256 until)']);
  it('decodes Error(string), Panic(uint256) and known custom errors', () => {
    expect(decodeRevert(encodeErrorResult({ abi: errors, errorName: 'Error', args: ['vault is closed'] }))).toEqual({
      kind: 'error-string', reason: 'vault is closed', selector: '0x08c379a0', errorName: 'Error', args: null,
    });
    expect(decodeRevert(encodeErrorResult({ abi: errors, errorName: 'Panic', args: [0x11n] }))).toMatchObject({ kind: 'panic', reason: 'panic 0x11: arithmetic overflow or underflow', args: { code: 17 } });
    expect(decodeRevert(encodeErrorResult({ abi: errors, errorName: 'Panic', args: [0x99n] })).reason).toBe('panic 0x99: unknown panic');
    expect(decodeRevert(encodeErrorResult({ abi: errors, errorName: 'ERC20InsufficientBalance', args: [A, 0n, 1n] }))).toEqual({
      kind: 'custom-error', reason: `ERC20InsufficientBalance(sender=${A}, balance=0, needed=1)`, selector: '0xe450d38c', errorName: 'ERC20InsufficientBalance', args: { sender: A, balance: '0', needed: '1' },
    });
  });

  it('names an unknown custom error by its selector, and says so for empty or short data', () => {
    const data = encodeErrorResult({ abi: errors, errorName: 'VaultLocked', args: [5n] });
    expect(decodeRevert(data)).toEqual({ kind: 'unknown-custom-error', reason: `custom error ${data.slice(0, 10)}`, selector: data.slice(0, 10), errorName: null, args: null });
    expect(decodeRevert('0x')).toMatchObject({ kind: 'empty', reason: 'reverted without a reason', selector: null });
    expect(decodeRevert(null).kind).toBe('empty');
    expect(decodeRevert('0x1234')).toMatchObject({ kind: 'undecodable', reason: 'reverted with 0x1234' });
    expect(decodeRevert('0x08c379a0').kind).toBe('unknown-custom-error');
  });
});

describe('context read (account kinds and token metadata in one aggregate3)', () => {
  const mc = parseAbi(['struct Result { bool success; bytes returnData; }', 'function aggregate3((address,bool,bytes)[] calls) returns (Result[] returnData)']);
  const word = (n: bigint | number) => pad(toHex(n));
  const answer = (results: { success: boolean; returnData: Hex }[]) => encodeFunctionResult({ abi: mc, functionName: 'aggregate3', result: results });
  const str = (s: string) => encodeAbiParameters([{ type: 'string' }], [s]);
  const ok = (returnData: Hex) => ({ success: true, returnData });
  const fail = { success: false, returnData: '0x' as Hex };

  it('places the probe and asks for block number, codes and five reads per token', () => {
    const c = contextCall({ accounts: [A, B], tokens: [T] });
    expect(c.stateOverride).toEqual({ [PROBE_ADDRESS]: { code: PROBE_CODE } });
    expect(c.to).toBe('0xcA11bde05977b3631167028862bE2a173976CA11');
    expect(c.data.slice(0, 10)).toBe('0x82ad56cb');
    expect(PROBE_CODE).toBe('0x5f5b368110156023578035803b8280015260205f838001602001833c506020016001565b3680015ff3');
  });

  it('decodes kinds: contract, EOA, EIP-7702 delegation with or without the delegate', () => {
    const req = { accounts: [A, B, T, USDC], tokens: [] };
    const designator = concat(['0xef0100', B]);
    const probe = concat([
      word(100), pad('0x6080604052', { dir: 'right' }),
      word(0), word(0),
      word(23), pad(designator, { dir: 'right' }),
      word(2), pad('0xef01', { dir: 'right' }),
    ]);
    const ctx = decodeContext(req, answer([{ success: true, returnData: word(42) }, { success: true, returnData: probe }]));
    expect(ctx.blockNumber).toBe(42n);
    expect(Object.fromEntries(ctx.accounts)).toEqual({
      [A.toLowerCase()]: { codeSize: 100, delegated: false, delegate: null },
      [B.toLowerCase()]: { codeSize: 0, delegated: false, delegate: null },
      [T.toLowerCase()]: { codeSize: 23, delegated: true, delegate: B },
      [USDC.toLowerCase()]: { codeSize: 2, delegated: true, delegate: null },
    });
  });

  it('decodes token metadata, bytes32 symbols, NFTs, and leaves unreadable tokens out', () => {
    const req = { accounts: [], tokens: [A, B, T] };
    const ctx = decodeContext(req, answer([
      ok(word(7)), ok('0x'),
      ok(str('Token A')), ok(str('TKA')), ok(word(18)), ok(word(10n ** 24n)), fail,
      ok(pad(stringToHex('MKR'), { dir: 'right' })), ok(pad(stringToHex('MKR\u0001'), { dir: 'right' })), ok(word(18)), fail, ok(word(0)),
      fail, fail, fail, fail, fail,
    ]));
    expect(ctx.tokens.get(A.toLowerCase())).toEqual({ name: 'Token A', symbol: 'TKA', decimals: 18, totalSupply: 10n ** 24n, standard: 'erc20' });
    expect(ctx.tokens.get(B.toLowerCase())).toEqual({ name: 'MKR', symbol: 'MKR', decimals: 18, totalSupply: null, standard: 'erc20' });
    expect(ctx.tokens.has(T.toLowerCase())).toBe(false);
    expect(decodeContext(req, '0x1234')).toEqual({ blockNumber: null, accounts: new Map(), tokens: new Map() });
  });

  it('drops control, bidi and invisible characters from names and symbols', () => {
    const req = { accounts: [], tokens: [A] };
    const ctx = decodeContext(req, answer([ok(word(7)), ok('0x'), ok(str('Tether\u202E\u200B USD\u0085')), ok(str('US\u2067DT')), ok(word(6)), ok(word(1)), fail]));
    expect(ctx.tokens.get(A.toLowerCase())).toMatchObject({ name: 'Tether USD', symbol: 'USDT' });
  });

  it('takes decimals() only up to 255: viem does not range-check uint8, and formatting 2^40 decimals would crash', () => {
    const req = { accounts: [], tokens: [A, B, T] };
    const token = (decimals: bigint) => [ok(str('Odd')), ok(str('ODD')), ok(word(decimals)), ok(word(1)), fail];
    const ctx = decodeContext(req, answer([ok(word(7)), ok('0x'), ...token(255n), ...token(256n), ...token(2n ** 40n)]));
    expect(ctx.tokens.get(A.toLowerCase())).toMatchObject({ decimals: 255, standard: 'erc20' });
    expect(ctx.tokens.get(B.toLowerCase())).toMatchObject({ symbol: 'ODD', decimals: null });
    expect(ctx.tokens.get(T.toLowerCase())).toMatchObject({ symbol: 'ODD', decimals: null });
  });
});

describe('call trace', () => {
  const frame = (f: Partial<CallFrame>): CallFrame => ({ type: 'CALL', from: A, to: B, gasUsed: '0x1', input: '0x', ...f });
  it('finds delegatecalls and tells forwarding proxies and self-multicalls from borrowed code', () => {
    const root = frame({
      to: T,
      input: '0xaabbccdd01',
      calls: [
        frame({ type: 'DELEGATECALL', from: T, to: B, input: '0xaabbccdd01' }),
        frame({ type: 'DELEGATECALL', from: T, to: T, input: '0x11223344' }),
        frame({ type: 'CALL', from: T, to: A, error: 'execution reverted', calls: [frame({ type: 'DELEGATECALL', from: A, to: USDC, input: '0x55667788' })] }),
      ],
    });
    const s = summariseTrace(root, A);
    expect(s.topLevelSubcalls).toBe(3);
    expect(s.frames).toBe(5);
    expect(s.delegatecalls).toEqual([
      { context: T, target: B, selector: '0xaabbccdd', forwarding: true, selfCall: false, inSenderContext: false, reverted: false },
      { context: T, target: T, selector: '0x11223344', forwarding: false, selfCall: true, inSenderContext: false, reverted: false },
      { context: A, target: USDC, selector: '0x55667788', forwarding: false, selfCall: false, inSenderContext: true, reverted: true },
    ]);
  });

  it('collects logs in execution order and value flows, skipping reverted frames', () => {
    const log = (n: number, position?: number) => ({ address: T, topics: [TRANSFER, topic(A), topic(B)], data: word32(n), ...(position === undefined ? {} : { position: toHex(position) }) });
    const root = frame({
      value: '0x5',
      logs: [log(1, 0), log(3, 1), log(5, 2)],
      calls: [frame({ from: B, to: T, logs: [log(2)] }), frame({ from: B, to: A, value: '0x7', error: 'reverted', logs: [log(99)] })],
    });
    const { logs, nativeTransfers } = traceLogs(root);
    expect(logs.map((l) => Number(BigInt(l.data)))).toEqual([1, 2, 3, 5]);
    expect(nativeTransfers).toEqual([{ from: A, to: B, value: 5n }]);
    expect(traceLogs(frame({ type: 'DELEGATECALL', value: '0x5' })).nativeTransfers).toEqual([]);
  });
});

function word32(n: number): Hex {
  return pad(toHex(n));
}

describe('asset movements', () => {
  const logs = [
    { address: USDC, topics: [TRANSFER, topic(A), topic(B)], data: word32(1_500_000) },
    { address: T, topics: [TRANSFER, topic(A), topic(B), word32(7)], data: '0x' as Hex },
    { address: WETH_ADDRESS, topics: [toEventSelector('Deposit(address,uint256)'), topic(A)], data: word32(10) },
    { address: WETH_ADDRESS, topics: [toEventSelector('Withdrawal(address,uint256)'), topic(A)], data: word32(4) },
    { address: T, topics: [toEventSelector('Deposit(address,uint256)'), topic(A)], data: word32(10) },
    { address: T, topics: [toEventSelector('Approval(address,address,uint256)'), topic(A), topic(B)], data: word32(3) },
  ];
  const moves = movementsOf(logs, [{ from: A, to: B, value: 10n ** 18n }]);

  it('reads native value, ERC-20 and ERC-721 transfers and WETH deposits and withdrawals', () => {
    expect(moves).toEqual([
      { standard: 'native', token: NATIVE_TOKEN, from: A, to: B, amount: 10n ** 18n, tokenId: null },
      { standard: 'erc20', token: USDC, from: A, to: B, amount: 1_500_000n, tokenId: null },
      { standard: 'erc721', token: T, from: A, to: B, amount: 1n, tokenId: 7n },
      { standard: 'erc20', token: WETH_ADDRESS, from: '0x0000000000000000000000000000000000000000', to: A, amount: 10n, tokenId: null },
      { standard: 'erc20', token: WETH_ADDRESS, from: A, to: '0x0000000000000000000000000000000000000000', amount: 4n, tokenId: null },
    ]);
  });

  it('formats amounts in token units, raw when decimals are unknown, and nets balances', () => {
    const tokens = new Map(Object.entries(STATIC_TOKENS));
    const changes = assetChanges(moves, tokens);
    expect(changes[0]).toEqual({ standard: 'native', token: NATIVE_TOKEN, symbol: 'ETH', decimals: 18, from: A, to: B, amount: '1', rawAmount: '1000000000000000000' });
    expect(changes[1]).toMatchObject({ symbol: 'USDC', decimals: 6, amount: '1.5', rawAmount: '1500000' });
    expect(changes[2]).toEqual({ standard: 'erc721', token: T, symbol: null, decimals: 0, from: A, to: B, amount: '1', rawAmount: '1', tokenId: '7' });
    const unknown = assetChanges([{ standard: 'erc20', token: T, from: A, to: B, amount: 123n, tokenId: null }], tokens);
    expect(unknown[0]).toMatchObject({ symbol: null, decimals: null, amount: '123' });
    expect(balanceChanges(moves, tokens)).toEqual([
      { address: A, token: NATIVE_TOKEN, symbol: 'ETH', delta: '-1' },
      { address: B, token: NATIVE_TOKEN, symbol: 'ETH', delta: '1' },
      { address: A, token: USDC, symbol: 'USDC', delta: '-1.5' },
      { address: B, token: USDC, symbol: 'USDC', delta: '1.5' },
      { address: A, token: WETH_ADDRESS, symbol: 'WETH', delta: '0.000000000000000006' },
    ]);
  });

  it('shows base units when a token\'s decimals are out of range, never a string of that length', () => {
    const odd = new Map([[T.toLowerCase(), { name: 'Odd', symbol: 'ODD', decimals: 1_099_511_627_776, totalSupply: null, standard: 'erc20' as const }]]);
    const move = { standard: 'erc20' as const, token: T, from: A, to: B, amount: 5n, tokenId: null };
    expect(assetChanges([move], odd)).toEqual([{ standard: 'erc20', token: T, symbol: 'ODD', decimals: null, from: A, to: B, amount: '5', rawAmount: '5' }]);
    expect(balanceChanges([move], odd)).toEqual([
      { address: A, token: T, symbol: 'ODD', delta: '-5' },
      { address: B, token: T, symbol: 'ODD', delta: '5' },
    ]);
  });

  it('decodes known events and keeps unknown logs raw', () => {
    const d = decodeLogs([...logs, { address: T, topics: ['0x' + 'ab'.repeat(32) as Hex], data: '0x01' }]);
    expect(d[0]).toEqual({ address: USDC, event: 'Transfer', args: { from: A, to: B, value: '1500000' } });
    expect(d[1]).toEqual({ address: T, event: 'Transfer', args: { from: A, to: B, tokenId: '7' } });
    expect(d[2]).toMatchObject({ event: 'Deposit', args: { dst: A, wad: '10' } });
    expect(d[5]).toMatchObject({ event: 'Approval', args: { owner: A, spender: B, value: '3' } });
    expect(d[6]).toEqual({ address: T, event: null, args: null, topics: ['0x' + 'ab'.repeat(32)], data: '0x01' });
  });
});

describe('input digest and fixed knowledge', () => {
  it('normalises addresses, value and data before digesting', () => {
    const loose = { chain: 'base' as const, to: '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01', from: A.toUpperCase().replace('0X', '0x'), valueWei: '007', data: '0xA9059CBB' };
    const norm = normalisePreflightInput(loose);
    expect(norm).toEqual({ chain: 'base', to: '0xabcdef0123456789abcdef0123456789abcdef01', from: A, valueWei: '7', data: '0xa9059cbb' });
    expect(preflightInputDigest(loose)).toBe(digestOf(norm));
    expect(preflightInputDigest(loose)).toBe(preflightInputDigest({ ...loose, valueWei: '7', data: '0xa9059cbb', to: loose.to.toLowerCase() }));
    // Absent value and data mean 0 and empty; an absent sender stays distinct from any sender.
    const bare = { chain: 'base' as const, to: B };
    expect(normalisePreflightInput(bare)).toEqual({ chain: 'base', to: B, from: null, valueWei: '0', data: '0x' });
    expect(preflightInputDigest(bare)).toBe(preflightInputDigest({ ...bare, valueWei: '0', data: '0x' }));
    expect(preflightInputDigest(bare)).not.toBe(preflightInputDigest({ ...bare, from: A }));
    expect(preflightInputDigest(bare)).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('knows precompiles, burn addresses and canonical deployments', () => {
    expect(['0x0000000000000000000000000000000000000001', '0x0000000000000000000000000000000000000011', '0x0000000000000000000000000000000000000100'].every(isPrecompile)).toBe(true);
    expect(['0x0000000000000000000000000000000000000000', '0x0000000000000000000000000000000000000012', '0x0000000000000000000000000000000000000101', A].some(isPrecompile)).toBe(false);
    expect(isBurnAddress('0x000000000000000000000000000000000000dead')).toBe(true);
    expect(isBurnAddress('0x0000000000000000000000000000000000000000')).toBe(true);
    expect(isBurnAddress(A)).toBe(false);
    expect(knownAs('0x4752BA5DBC23F44D87826276BF6FD6B1C372AD24')).toBe('Uniswap V2 Router');
    expect(knownAs(USDC.toLowerCase())).toBe('USDC');
    expect(knownAs(A)).toBeNull();
  });
});
