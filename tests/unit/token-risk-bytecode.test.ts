import { describe, expect, it } from 'vitest';
import { encodeAbiParameters, encodeErrorResult, parseAbi, stringToHex, toFunctionSelector, type Address, type Hex } from 'viem';
import { eip1167Target, eip7702Delegate, PRIVILEGED_SELECTORS, privilegedSelectors, scanCode } from '../../src/features/token-risk/bytecode.js';
import { BASE_UNISWAP_V2, getAmountOut, pairAddress, sortTokens } from '../../src/features/token-risk/dex.js';
import { lookupLiquidity } from '../../src/features/token-risk/market.js';
import { choosePool, measurable, probeSizes, quoteValueUsdc, WETH_FLOOR_USDC, wethPriceUsdc } from '../../src/features/token-risk/pools.js';
import { MarketData } from '../../src/platform/market/failover.js';
import { ProviderError, type MarketProvider, type ProviderOutcome } from '../../src/platform/market/types.js';
import { asAddress, asBool, asString, asUint, slotAddress } from '../../src/features/token-risk/rpc.js';
import { revertReason } from '../../src/features/token-risk/simulate.js';

const IMPL = '0xbebebebebebebebebebebebebebebebebebebebe';

describe('bytecode scan', () => {
  it('knows the standard selectors', () => {
    const sel = (sig: string) => PRIVILEGED_SELECTORS.find((s) => s.signature === sig)?.selector;
    expect(sel('mint(address,uint256)')).toBe('0x40c10f19');
    expect(sel('pause()')).toBe('0x8456cb59');
    expect(sel('blacklist(address)')).toBe('0xf9f92be4');
    expect(sel('upgradeTo(address)')).toBe('0x3659cfe6');
    expect(sel('upgradeToAndCall(address,bytes)')).toBe('0x4f1ef286');
    // The tax setters of the common launch templates count as fee privileges.
    for (const sig of ['updateBuyFees(uint256,uint256,uint256)', 'updateSellFees(uint256,uint256,uint256)', 'excludeFromFees(address,bool)']) {
      expect(PRIVILEGED_SELECTORS.find((s) => s.signature === sig)).toMatchObject({ kind: 'fee', selector: toFunctionSelector(`function ${sig}`) });
    }
    expect(new Set(PRIVILEGED_SELECTORS.map((s) => s.selector)).size).toBe(PRIVILEGED_SELECTORS.length);
  });

  it('finds PUSH4 selectors of a dispatcher and PUSH3 selectors with a leading zero byte', () => {
    // DUP1 PUSH4 40c10f19 EQ PUSH2 0010 JUMPI  DUP1 PUSH3 00abcd EQ
    const code: Hex = '0x806340c10f1914610010578062abcdef14';
    const scan = scanCode(code);
    expect(scan.pushedSelectors.has('0x40c10f19')).toBe(true);
    expect(scan.pushedSelectors.has('0x00abcdef')).toBe(true);
    expect(scan.delegatecall).toBe(false);
    expect(privilegedSelectors(scan).map((s) => s.signature)).toEqual(['mint(address,uint256)']);
  });

  it('never reads push data as opcodes or selectors', () => {
    // PUSH32 whose data contains 0x63 40c10f19 and 0xf4; then STOP.
    const data = `6340c10f19f4${'00'.repeat(26)}`;
    const scan = scanCode(`0x7f${data}00`);
    expect(scan.pushedSelectors.has('0x40c10f19')).toBe(false);
    expect(scan.delegatecall).toBe(false);
    expect(scanCode('0x60006000f4').delegatecall).toBe(true);
  });

  it('tolerates truncated push data at the end of the code', () => {
    expect(() => scanCode('0x6340c1')).not.toThrow();
    expect(scanCode('0x6340c1').pushedSelectors.size).toBe(0);
  });

  it('recognises EIP-1167 clones and EIP-7702 delegation designators, nothing else', () => {
    const clone: Hex = `0x363d3d373d3d3d363d73${IMPL.slice(2)}5af43d82803e903d91602b57fd5bf3`;
    expect(eip1167Target(clone)?.toLowerCase()).toBe(IMPL);
    expect(eip1167Target(`${clone}00`)).toBeNull();
    expect(eip7702Delegate(`0xef0100${IMPL.slice(2)}`)?.toLowerCase()).toBe(IMPL);
    expect(eip7702Delegate(`0xef0100${IMPL.slice(2)}00`)).toBeNull();
    expect(eip7702Delegate(clone)).toBeNull();
  });
});

describe('Uniswap v2 maths', () => {
  it('computes pair addresses with CREATE2 (known answer: Ethereum mainnet USDC/WETH)', () => {
    const mainnet = { factory: '0x5C69bEe701ef814a2B6a3EDD4B1652CB9cc5aA6f' as const, pairInitCodeHash: BASE_UNISWAP_V2.pairInitCodeHash };
    const usdc = '0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48';
    const weth = '0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2';
    expect(pairAddress(mainnet, usdc, weth)).toBe('0xB4e16d0168e52d35CaCD2c6185b44281Ec28C9Dc');
    expect(pairAddress(mainnet, weth, usdc)).toBe('0xB4e16d0168e52d35CaCD2c6185b44281Ec28C9Dc');
    expect(sortTokens(weth, usdc)[0]).toBe(usdc);
  });

  it('quotes like UniswapV2Library.getAmountOut', () => {
    expect(getAmountOut(1000n, 1_000_000n, 1_000_000n)).toBe(996n);
    expect(getAmountOut(10n ** 18n, 10n * 10n ** 18n, 500_000n * 10n ** 18n)).toBe(45330544694007456579067n);
    expect(getAmountOut(0n, 1n, 1n)).toBe(0n);
    expect(getAmountOut(1n, 0n, 1n)).toBe(0n);
  });
});

describe('the pool to simulate (pools.ts)', () => {
  const E18 = 10n ** 18n;
  const USDC6 = 10n ** 6n;
  const WETH_Q = { symbol: 'WETH' as const, address: BASE_UNISWAP_V2.weth, decimals: 18 };
  const USDC_Q = { symbol: 'USDC' as const, address: BASE_UNISWAP_V2.usdc, decimals: 6 };
  const candidate = (quote: typeof WETH_Q | typeof USDC_Q, rToken: bigint, rQuote: bigint, pair: Address) => ({ quote, pair, expected: true, reserves: { rToken, rQuote }, tokenBalance: rToken });
  const A = '0x00000000000000000000000000000000000000aa' as Address;
  const B = '0x00000000000000000000000000000000000000bb' as Address;
  const ETH_3000 = 3000n * USDC6;

  it('takes the deepest pool by the USD value of its quote side, not the first one', () => {
    const deepUsdc = candidate(USDC_Q, 500_000n * E18, 25_000n * USDC6, B);
    expect(choosePool([candidate(WETH_Q, E18, 100n, A), deepUsdc], ETH_3000)).toMatchObject({ kind: 'pool', pool: { pair: B, quote: { symbol: 'USDC' } } });
    // 5 WETH is 15,000 USDC: more raw units, less depth.
    expect(choosePool([candidate(WETH_Q, 100_000n * E18, 5n * E18, A), deepUsdc], ETH_3000)).toMatchObject({ kind: 'pool', pool: { pair: B } });
    expect(choosePool([candidate(WETH_Q, 100_000n * E18, 10n * E18, A), deepUsdc], ETH_3000)).toMatchObject({ kind: 'pool', pool: { pair: A, quote: { symbol: 'WETH' } } });
    // The token side costs a holder nothing: a huge token reserve against dust never wins.
    expect(choosePool([candidate(WETH_Q, 10n ** 30n, 10n ** 9n, A), deepUsdc], ETH_3000)).toMatchObject({ kind: 'pool', pool: { pair: B } });
  });

  it('a pool whose probe would round to nothing is too shallow; with no other pool that is the answer', () => {
    expect(measurable({ rToken: E18, rQuote: 100n })).toBe(false);
    expect(probeSizes({ rToken: E18, rQuote: 100n }).fairSell).toBe(0n); // the pair would revert INSUFFICIENT_OUTPUT_AMOUNT
    expect(measurable({ rToken: 5n, rQuote: 10n ** 24n })).toBe(false); // a few token units cannot show a tax
    expect(measurable({ rToken: 500_000n * E18, rQuote: 25_000n * USDC6 })).toBe(true);
    expect(choosePool([candidate(WETH_Q, E18, 100n, A)], ETH_3000)).toEqual({ kind: 'shallow', pools: [{ pair: A, quote: 'WETH', reserveToken: E18, reserveQuote: 100n, quoteValueUsdc: 0n }] });
    expect(choosePool([candidate(USDC_Q, 0n, 0n, B)], ETH_3000)).toEqual({ kind: 'none' });
    expect(choosePool([], ETH_3000)).toEqual({ kind: 'none' });
  });

  it('values WETH at the WETH/USDC pool when it holds 10,000 USDC or more, else at the 1,000 USDC floor', () => {
    const [t0] = sortTokens(BASE_UNISWAP_V2.weth, BASE_UNISWAP_V2.usdc);
    const reserves = (weth: bigint, usdc: bigint) => ({ wethUsdcReserves: { success: true, data: encodeAbiParameters([{ type: 'uint112' }, { type: 'uint112' }, { type: 'uint32' }], t0 === BASE_UNISWAP_V2.weth ? [weth, usdc, 0] : [usdc, weth, 0]) } });
    expect(wethPriceUsdc(BASE_UNISWAP_V2, reserves(100n * E18, 300_000n * USDC6))).toBe(ETH_3000);
    expect(wethPriceUsdc(BASE_UNISWAP_V2, reserves(E18, 5_000n * USDC6))).toBe(WETH_FLOOR_USDC);
    expect(wethPriceUsdc(BASE_UNISWAP_V2, {})).toBe(WETH_FLOOR_USDC);
    expect(quoteValueUsdc('WETH', 5n * E18, ETH_3000)).toBe(15_000n * USDC6);
  });
});

describe('result decoding', () => {
  const ok = (data: Hex) => ({ success: true, data });
  it('reads uints, booleans and addresses strictly', () => {
    const word = encodeAbiParameters([{ type: 'uint256' }], [5n]);
    expect(asUint(ok(word))).toBe(5n);
    expect(asUint({ success: false, data: word })).toBeNull();
    expect(asUint(ok('0x'))).toBeNull();
    expect(asBool(ok(encodeAbiParameters([{ type: 'bool' }], [true])))).toBe(true);
    expect(asBool(ok(word))).toBeNull();
    const addr = asAddress(ok(encodeAbiParameters([{ type: 'address' }], [IMPL])));
    expect(addr.malformed).toBe(false);
    expect(addr.value?.toLowerCase()).toBe(IMPL);
    expect(asAddress(ok(`0x${'ff'.repeat(32)}`))).toEqual({ value: null, malformed: true });
    expect(asAddress(ok('0x'))).toEqual({ value: null, malformed: false });
    expect(asAddress({ success: false, data: '0x' })).toEqual({ value: null, malformed: false });
  });

  it('reads ABI strings and bytes32 strings', () => {
    expect(asString(ok(encodeAbiParameters([{ type: 'string' }], ['Maker'])))).toBe('Maker');
    expect(asString(ok(stringToHex('MKR', { size: 32 })))).toBe('MKR');
    expect(asString(ok(`0x${'ff'.repeat(32)}`))).toBeNull();
  });

  it('drops control, bidi and invisible characters from ABI strings and never cuts a surrogate pair', () => {
    const str = (s: string) => ok(encodeAbiParameters([{ type: 'string' }], [s]));
    // U+202E would show "USDC‮gnp.exe" as "USDCexe.png"; U+200B hides inside a look-alike.
    expect(asString(str('US\u200BDC\u202Egnp.exe\u0007\u0085\u2066x\u2069'))).toBe('USDCgnp.exex');
    expect(asString(str('a'.repeat(199) + '\u{1F600}b'))).toBe('a'.repeat(199) + '\u{1F600}');
  });

  it('reads addresses from storage words', () => {
    expect(slotAddress(`0x${'00'.repeat(32)}`)).toBeNull();
    expect(slotAddress(`0x${'00'.repeat(12)}${IMPL.slice(2)}`)?.toLowerCase()).toBe(IMPL);
    expect(slotAddress(`0x01${'00'.repeat(11)}${IMPL.slice(2)}`)).toBeNull();
  });

  it('turns revert data into short reasons', () => {
    expect(revertReason(encodeErrorResult({ abi: parseAbi(['error Error(string)']), errorName: 'Error', args: ['TransferHelper: TRANSFER_FROM_FAILED'] }))).toBe('TransferHelper: TRANSFER_FROM_FAILED');
    expect(revertReason(encodeErrorResult({ abi: parseAbi(['error Panic(uint256)']), errorName: 'Panic', args: [17n] }))).toBe('Panic(17)');
    const custom = toFunctionSelector('function TransferFailed()');
    expect(revertReason(custom)).toBe(`custom error ${custom}`);
    expect(revertReason('0x')).toBeNull();
    expect(revertReason(undefined)).toBeNull();
  });
});

describe('market lookup for the liquidity category', () => {
  const snapshot = {
    provider: 'dexscreener',
    fetchedAt: new Date('2026-01-01T00:00:00Z'),
    liquidityUsd: '12345.6',
    pairs: [{ dex: 'uniswap', pairAddress: '0xpair', quoteToken: { address: '0xq', symbol: 'WETH' }, liquidityUsd: '12345.6' }],
  };
  it('maps fresh, stale, empty, none, failing and missing lookups', async () => {
    expect(await lookupLiquidity(undefined, '0xabc')).toEqual({ status: 'not_configured' });
    expect(await lookupLiquidity(async () => ({ kind: 'market', snapshot }), '0xABC')).toEqual({
      status: 'ok',
      provider: 'dexscreener',
      fetchedAt: '2026-01-01T00:00:00.000Z',
      liquidityUsd: '12345.6',
      pairs: [{ dex: 'uniswap', pairAddress: '0xpair', quoteSymbol: 'WETH', liquidityUsd: '12345.6' }],
    });
    expect(await lookupLiquidity(async () => ({ kind: 'market', snapshot, stale: true }), '0xabc')).toEqual({ status: 'stale' });
    expect(await lookupLiquidity(async () => ({ kind: 'empty' }), '0xabc')).toEqual({ status: 'empty' });
    expect(await lookupLiquidity(async () => ({ kind: 'none' }), '0xabc')).toEqual({ status: 'none' });
    expect(await lookupLiquidity(async () => Promise.reject(new Error('down')), '0xabc')).toEqual({ status: 'failed' });
  });

  it("takes the platform's fresh MarketData.lookup as is (its failure is a coverage gap, not an error)", async () => {
    const provider = (answer: ProviderOutcome | Error): MarketProvider => ({
      name: 'dexscreener',
      lookup: async () => {
        if (answer instanceof Error) throw answer;
        return answer;
      },
    });
    const market = { kind: 'market' as const, snapshot: { ...snapshot, provider: 'dexscreener' as const, token: { address: '0xabc', name: null, symbol: null, decimals: null }, priceUsd: '1', volume24hUsd: null, fdvUsd: null, marketCapUsd: null, priceChange24hPct: null, pairs: snapshot.pairs.map((p) => ({ ...p, createdAt: null })) } };
    const data = new MarketData([provider(market)]);
    expect(await lookupLiquidity((a) => data.lookup(a), '0xabc')).toMatchObject({ status: 'ok', liquidityUsd: '12345.6' });
    const down = new MarketData([provider(new ProviderError('dexscreener', 'timeout', 'slow', true))]);
    expect(await lookupLiquidity((a) => down.lookup(a), '0xabc')).toEqual({ status: 'failed' });
  });

  it('asks with the lower-case address', async () => {
    const seen: string[] = [];
    await lookupLiquidity(async (a) => (seen.push(a), { kind: 'none' }), '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01');
    expect(seen).toEqual(['0xabcdef0123456789abcdef0123456789abcdef01']);
  });
});
