import { erc20Abi, zeroAddress, type Address } from 'viem';
import { factoryAbi, getAmountOut, pairAbi, pairAddress, sortTokens, type DexConfig } from './dex.js';
import type { PoolEvidence, ShallowPool } from './evidence.js';
import { asAddress, asUint, read, type Read, type ReadResult } from './rpc.js';

/**
 * Which Uniswap v2 pool the token-risk simulation trades through, and whether it can be measured
 * at all. Shared by the paid report (collect.ts) and the free coverage check (tokens/coverage.ts),
 * so the coverage check never promises a simulation the report cannot make.
 *
 * Depth, not order: every candidate pool (the token against WETH and against USDC) is read, and
 * the one whose QUOTE side is worth the most USDC is simulated. The quote side is what a pool's
 * creator must really pay for; the token side costs a holder nothing to inflate, so it is never
 * the measure. USDC counts 1:1; WETH is valued at the spot price of the WETH/USDC v2 pool (read in
 * the same Multicall3) when that pool holds at least 10,000 USDC, else at a floor of 1,000 USDC per
 * WETH, far below where ETH trades, so an unknown price can only understate a WETH pool.
 *
 * Too shallow to measure: a pool where a probe step (the buy's input, the tokens it should buy,
 * the transfer, the sell, and the sell's fair output) would be under MIN_PROBE_UNITS raw units is
 * no usable pool. With a few units the pair itself reverts (`INSUFFICIENT_OUTPUT_AMOUNT` when the
 * fair output rounds to 0) and a tax cannot be told apart from rounding, so such a simulation
 * would prove nothing about the token; it is reported as missing evidence, never as a honeypot.
 * 10,000 units measures a tax to about one basis point, the resolution the report publishes.
 */

export type QuoteSymbol = 'WETH' | 'USDC';

export const MIN_PROBE_UNITS = 10_000n;
const USDC_UNIT = 10n ** 6n;
const WETH_UNIT = 10n ** 18n;
/** The WETH/USDC pool's spot price is used only when it holds at least this much USDC. */
export const MIN_PRICE_POOL_USDC = 10_000n * USDC_UNIT;
/** USDC per WETH when no price can be read: far below the market, so WETH pools are never overstated. */
export const WETH_FLOOR_USDC = 1_000n * USDC_UNIT;

export interface Quote {
  symbol: QuoteSymbol;
  address: Address;
  decimals: number;
}

/** The quotes a token can be traded against (never itself). */
export function quotesFor(dex: DexConfig, token: Address): Quote[] {
  const all: Quote[] = [
    { symbol: 'WETH', address: dex.weth, decimals: 18 },
    { symbol: 'USDC', address: dex.usdc, decimals: 6 },
  ];
  return all.filter((q) => q.address.toLowerCase() !== token.toLowerCase());
}

export interface Reserves {
  rToken: bigint;
  rQuote: bigint;
}

export interface PoolCandidate {
  quote: Quote;
  pair: Address;
  /** The factory's pair sits at the CREATE2 address, so its reserves were read in the same request. */
  expected: boolean;
  /** null until read (pairs at unexpected addresses), or when getReserves did not answer. */
  reserves: Reserves | null;
  /** balanceOf(pair) of the token. */
  tokenBalance: bigint | null;
}

/** The probe sizes of the simulation (simulate.ts trades exactly these). */
export interface ProbeSizes {
  buyIn: bigint;
  /** The pool's fair output for buyIn (0.3% fee, no tax). */
  fairBuy: bigint;
  transfer: bigint;
  sell: bigint;
  /** The fair output of the sell, after the buy moved the reserves. */
  fairSell: bigint;
}

/** The buy spends 0.5% of the quote reserve; the transfer moves 10% and the sell 50% of what it should buy. */
export function probeSizes(r: Reserves): ProbeSizes {
  const buyIn = r.rQuote / 200n > 0n ? r.rQuote / 200n : 1n;
  const fairBuy = getAmountOut(buyIn, r.rQuote, r.rToken);
  const sell = fairBuy / 2n;
  return { buyIn, fairBuy, transfer: fairBuy / 10n, sell, fairSell: getAmountOut(sell, r.rToken - fairBuy, r.rQuote + buyIn) };
}

/** Whether every probe step of a pool is large enough to be measured (see above). */
export function measurable(r: Reserves): boolean {
  if (r.rToken <= 0n || r.rQuote <= 0n) return false;
  const p = probeSizes(r);
  return [p.buyIn, p.fairBuy, p.transfer, p.sell, p.fairSell].every((v) => v >= MIN_PROBE_UNITS);
}

/** The quote reserve in USDC micro-units. */
export function quoteValueUsdc(quote: QuoteSymbol, rQuote: bigint, wethPriceUsdc: bigint): bigint {
  return quote === 'USDC' ? rQuote : (rQuote * wethPriceUsdc) / WETH_UNIT;
}

export type PoolChoice =
  | { kind: 'pool'; pool: PoolEvidence; tokenBalance: bigint | null }
  /** Pools with reserves exist, but none can be measured. */
  | { kind: 'shallow'; pools: ShallowPool[] }
  | { kind: 'none' };

/** The deepest measurable pool among candidates whose reserves are known; the first wins a tie. */
export function choosePool(candidates: PoolCandidate[], wethPriceUsdc: bigint): PoolChoice {
  let best: { c: PoolCandidate; r: Reserves; value: bigint } | null = null;
  const shallow: ShallowPool[] = [];
  for (const c of candidates) {
    const r = c.reserves;
    if (!r || r.rToken <= 0n || r.rQuote <= 0n) continue;
    const value = quoteValueUsdc(c.quote.symbol, r.rQuote, wethPriceUsdc);
    if (!measurable(r)) {
      shallow.push({ pair: c.pair, quote: c.quote.symbol, reserveToken: r.rToken, reserveQuote: r.rQuote, quoteValueUsdc: value });
      continue;
    }
    if (!best || value > best.value) best = { c, r, value };
  }
  if (best) {
    const { c, r } = best;
    return { kind: 'pool', pool: { dex: 'uniswap-v2', pair: c.pair, quote: { ...c.quote }, reserveToken: r.rToken, reserveQuote: r.rQuote }, tokenBalance: c.tokenBalance };
  }
  return shallow.length ? { kind: 'shallow', pools: shallow } : { kind: 'none' };
}

// ---- the reads (one Multicall3 request) and their decoding ----

/** getPair, getReserves at the CREATE2 address and the pool's token balance per quote, plus the WETH/USDC reserves for the price. */
export function poolReads(dex: DexConfig, token: Address): Record<string, Read> {
  const reads: Record<string, Read> = {};
  for (const q of quotesFor(dex, token)) {
    const computed = pairAddress(dex, token, q.address);
    reads[`pair${q.symbol}`] = read(dex.factory, factoryAbi, 'getPair', [token, q.address]);
    reads[`reserves${q.symbol}`] = read(computed, pairAbi, 'getReserves');
    reads[`poolBalance${q.symbol}`] = read(token, erc20Abi, 'balanceOf', [computed]);
  }
  reads.wethUsdcReserves = read(pairAddress(dex, dex.weth, dex.usdc), pairAbi, 'getReserves');
  return reads;
}

/** The factory's pairs of the token; reserves are null for pairs at unexpected addresses (read them with farPoolReads). */
export function poolCandidates(dex: DexConfig, token: Address, r: Record<string, ReadResult | undefined>): PoolCandidate[] {
  const out: PoolCandidate[] = [];
  for (const quote of quotesFor(dex, token)) {
    const pair = asAddress(r[`pair${quote.symbol}`]).value;
    if (!pair || pair === zeroAddress) continue;
    const expected = pair === pairAddress(dex, token, quote.address);
    out.push({
      quote,
      pair,
      expected,
      reserves: expected ? reservesFor(r[`reserves${quote.symbol}`], token, quote.address) : null,
      tokenBalance: expected ? asUint(r[`poolBalance${quote.symbol}`]) : null,
    });
  }
  return out;
}

/** Reads of the pairs the factory named at unexpected addresses (a second request, rare). */
export function farPoolReads(token: Address, candidates: PoolCandidate[]): Record<string, Read> {
  const reads: Record<string, Read> = {};
  for (const c of candidates.filter((c) => !c.expected)) {
    reads[`farReserves${c.quote.symbol}`] = read(c.pair, pairAbi, 'getReserves');
    reads[`farBalance${c.quote.symbol}`] = read(token, erc20Abi, 'balanceOf', [c.pair]);
  }
  return reads;
}

/** The candidates with the far pairs' reserves filled in. */
export function withFarPools(token: Address, candidates: PoolCandidate[], r: Record<string, ReadResult | undefined>): PoolCandidate[] {
  return candidates.map((c) =>
    c.expected ? c : { ...c, reserves: reservesFor(r[`farReserves${c.quote.symbol}`], token, c.quote.address), tokenBalance: asUint(r[`farBalance${c.quote.symbol}`]) },
  );
}

/** USDC (micro-units) per WETH from the WETH/USDC v2 pool, or the floor when it is missing or thin. */
export function wethPriceUsdc(dex: DexConfig, r: Record<string, ReadResult | undefined>): bigint {
  const res = reservesFor(r.wethUsdcReserves, dex.weth, dex.usdc);
  if (!res || res.rToken <= 0n || res.rQuote < MIN_PRICE_POOL_USDC) return WETH_FLOOR_USDC;
  const spot = (res.rQuote * WETH_UNIT) / res.rToken;
  return spot > WETH_FLOOR_USDC ? spot : WETH_FLOOR_USDC;
}

/** A pair's reserves, oriented as token / quote. */
export function reservesFor(res: ReadResult | undefined, token: Address, quote: Address): Reserves | null {
  if (!res?.success || res.data.length < 2 + 64 * 2) return null;
  const r0 = BigInt(res.data.slice(0, 66));
  const r1 = BigInt(`0x${res.data.slice(66, 130)}`);
  return sortTokens(token, quote)[0].toLowerCase() === token.toLowerCase() ? { rToken: r0, rQuote: r1 } : { rToken: r1, rQuote: r0 };
}
