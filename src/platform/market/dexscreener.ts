import { Type } from 'typebox';
import { getAddress } from 'viem';
import { addDecimals } from './decimal.js';
import { getJson, type HttpPolicy } from './http.js';
import { DECIMAL_TEXT, byLiquidityDesc, evmAddress, isoFromMillis, pctOrNull, shapeCheck, topPairs, usd, usdOrNull } from './normalize.js';
import { tokenText } from '../token-metadata.js';
import { ProviderError, type MarketPair, type MarketProvider, type MarketSnapshot, type ProviderOutcome } from './types.js';

/**
 * DexScreener (https://docs.dexscreener.com/api/reference), chain id `base`:
 *   GET {base}/tokens/v1/base/{tokenAddresses}     → array of pairs (the token's top pairs, base OR quote side)
 *   GET {base}/token-pairs/v1/base/{tokenAddress}  → array of pairs (all the token's pools)
 * A pair: { chainId, dexId, url, pairAddress, baseToken{address,name,symbol}, quoteToken{...},
 * priceNative (string), priceUsd (string), txns, volume{h24,...} (numbers), priceChange{h24,...}
 * (numbers), liquidity{usd,base,quote} (numbers, absent for some DEXes), fdv, marketCap (numbers,
 * optional), pairCreatedAt (ms) }. DexScreener gives no decimals: the caller reads them on chain.
 */

const NAME = 'dexscreener' as const;

const Base = Type.Object({ chainId: Type.String(), baseToken: Type.Object({ address: Type.String() }) });
const Pair = Type.Object({
  chainId: Type.String(),
  dexId: Type.String({ minLength: 1 }),
  pairAddress: Type.String(),
  baseToken: Type.Object({ address: Type.String(), name: Type.String(), symbol: Type.String() }),
  quoteToken: Type.Object({ address: Type.String(), symbol: Type.String() }),
  priceUsd: Type.String({ pattern: DECIMAL_TEXT }),
  volume: Type.Object({ h24: Type.Number() }),
  priceChange: Type.Optional(Type.Object({ h24: Type.Optional(Type.Number()) })),
  liquidity: Type.Optional(Type.Object({ usd: Type.Number() })),
  fdv: Type.Optional(Type.Union([Type.Number(), Type.Null()])),
  marketCap: Type.Optional(Type.Union([Type.Number(), Type.Null()])),
  pairCreatedAt: Type.Optional(Type.Number()),
});
interface Pair {
  chainId: string;
  dexId: string;
  pairAddress: string;
  baseToken: { address: string; name: string; symbol: string };
  quoteToken: { address: string; symbol: string };
  priceUsd: string;
  volume: { h24: number };
  priceChange?: { h24?: number };
  liquidity?: { usd: number };
  fdv?: number | null;
  marketCap?: number | null;
  pairCreatedAt?: number;
}
const checkBase = shapeCheck<{ chainId: string; baseToken: { address: string } }>(NAME, 'pair', Base);
const checkPair = shapeCheck<Pair>(NAME, 'pair', Pair);

interface Normalized extends MarketPair {
  priceUsd: string;
  volume24hUsd: string;
  fdvUsd: string | null;
  marketCapUsd: string | null;
  priceChange24hPct: string | null;
  name: string;
  symbol: string;
}

function normalize(p: Pair, i: number): Normalized {
  const at = `pairs[${i}]`;
  return {
    dex: tokenText(p.dexId),
    pairAddress: evmAddress(NAME, p.pairAddress, `${at}.pairAddress`),
    quoteToken: { address: evmAddress(NAME, p.quoteToken.address, `${at}.quoteToken.address`), symbol: tokenText(p.quoteToken.symbol) },
    liquidityUsd: p.liquidity ? usd(NAME, p.liquidity.usd, `${at}.liquidity.usd`) : null,
    createdAt: isoFromMillis(p.pairCreatedAt),
    priceUsd: usd(NAME, p.priceUsd, `${at}.priceUsd`),
    volume24hUsd: usd(NAME, p.volume.h24, `${at}.volume.h24`),
    fdvUsd: usdOrNull(NAME, p.fdv, `${at}.fdv`),
    marketCapUsd: usdOrNull(NAME, p.marketCap, `${at}.marketCap`),
    priceChange24hPct: pctOrNull(NAME, p.priceChange?.h24, `${at}.priceChange.h24`),
    name: p.baseToken.name,
    symbol: p.baseToken.symbol,
  };
}

export class DexScreenerProvider implements MarketProvider {
  readonly name = NAME;
  private readonly baseUrl: string;

  constructor(baseUrl: string, private readonly policy: HttpPolicy, private readonly now: () => Date) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
  }

  private async pairs(path: string): Promise<unknown[]> {
    const { body } = await getJson(NAME, this.baseUrl + path, this.policy);
    if (Array.isArray(body)) return body;
    // The legacy /latest/dex shape ({schemaVersion, pairs: null}) is what DexScreener answers
    // when it "knows nothing"; on a v1 path it means the API is not answering as documented.
    if (typeof body === 'object' && body !== null && 'pairs' in body && (body as { pairs: unknown }).pairs === null) {
      throw new ProviderError(NAME, 'pairs_null', `${path}: pairs is null`);
    }
    throw new ProviderError(NAME, 'shape', `${path}: expected an array of pairs`);
  }

  /** The pairs on Base where `address` is the BASE token: only their price is the token's price. */
  private baseSide(list: unknown[], address: string): Pair[] {
    return list
      .map((raw) => checkBase(raw))
      .filter((p) => p.chainId === 'base' && p.baseToken.address.toLowerCase() === address)
      .map((p) => checkPair(p));
  }

  async lookup(address: string): Promise<ProviderOutcome> {
    const top = await this.pairs(`/tokens/v1/base/${address}`);
    let base = this.baseSide(top, address);
    if (base.length === 0) {
      // /tokens/v1 lists at most 30 pairs and mixes in pairs where the token is the quote token
      // (WETH, USDC); the token's own pools are all in /token-pairs/v1.
      const all = await this.pairs(`/token-pairs/v1/base/${address}`);
      base = this.baseSide(all, address);
      if (base.length === 0) {
        if (top.length === 0 && all.length === 0) return { kind: 'empty' };
        throw new ProviderError(NAME, 'quote_token_only', 'the token appears only as the quote token of its pairs');
      }
    }
    const pairs = byLiquidityDesc(base.map(normalize));
    const main = pairs[0]!;
    const liquidity = pairs.map((p) => p.liquidityUsd).filter((v): v is string => v !== null);
    const snapshot: MarketSnapshot = {
      provider: NAME,
      token: { address: getAddress(address), name: main.name, symbol: main.symbol, decimals: null },
      priceUsd: main.priceUsd,
      liquidityUsd: liquidity.length ? addDecimals(liquidity) : null,
      volume24hUsd: addDecimals(pairs.map((p) => p.volume24hUsd)),
      fdvUsd: main.fdvUsd,
      marketCapUsd: main.marketCapUsd,
      priceChange24hPct: main.priceChange24hPct,
      pairs: topPairs(pairs.map(({ dex, pairAddress, quoteToken, liquidityUsd, createdAt }) => ({ dex, pairAddress, quoteToken, liquidityUsd, createdAt }))),
      fetchedAt: this.now(),
    };
    return { kind: 'market', snapshot };
  }
}
