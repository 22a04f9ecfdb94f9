import type { LiquidityEvidence } from './evidence.js';

/**
 * The token-risk report's view of market data: a function the app wires to the market providers
 * (src/platform/market). It must ask the providers now: `stale: true` marks an answer served from
 * an earlier fetch, which a paid report never uses. The shape is a structural subset of the
 * providers' MarketSnapshot, so a snapshot can be passed through as is.
 */
export interface MarketLiquidity {
  provider: string;
  fetchedAt: Date;
  /** USD as a decimal string, as the providers report it; null when unknown. */
  liquidityUsd: string | null;
  pairs: Array<{ dex: string; pairAddress: string; quoteToken: { address: string; symbol: string }; liquidityUsd: string | null }>;
}

export type MarketLookupResult =
  | { kind: 'market'; snapshot: MarketLiquidity; stale?: boolean }
  /** Authoritative: the token has no Base market. */
  | { kind: 'none' }
  /** An empty pair list: providers also answer this transiently for listed tokens. */
  | { kind: 'empty' };

/** `address` is lower-case 0x + 40 hex. Throwing means "unavailable". */
export type TokenMarketLookup = (address: string) => Promise<MarketLookupResult>;

/** Never throws: market data informs the liquidity category only, so its failure is a coverage gap, not a 502. */
export async function lookupLiquidity(market: TokenMarketLookup | undefined, address: string): Promise<LiquidityEvidence> {
  if (!market) return { status: 'not_configured' };
  let res: MarketLookupResult;
  try {
    res = await market(address.toLowerCase());
  } catch {
    return { status: 'failed' };
  }
  if (res.kind === 'none') return { status: 'none' };
  if (res.kind === 'empty') return { status: 'empty' };
  if (res.stale) return { status: 'stale' };
  const s = res.snapshot;
  return {
    status: 'ok',
    provider: s.provider,
    fetchedAt: s.fetchedAt.toISOString(),
    liquidityUsd: s.liquidityUsd,
    pairs: s.pairs.map((p) => ({ dex: p.dex, pairAddress: p.pairAddress, quoteSymbol: p.quoteToken.symbol, liquidityUsd: p.liquidityUsd })),
  };
}
