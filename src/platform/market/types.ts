/**
 * One normalized view of a token's Base market, whichever provider answered.
 *
 * Money-like USD figures (price, liquidity, volume, FDV, market cap) and the 24 h price change
 * are DECIMAL STRINGS ("0.00001234", "1523400.5"), never JSON numbers: they are market metrics,
 * not amounts the service charges, but they are kept exact so that nothing downstream (a risk
 * rule comparing liquidity with a threshold, say) ever decides on a float. `null` means the
 * provider did not report that figure.
 */

export const PROVIDER_NAMES = ['dexscreener', 'geckoterminal'] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];

export interface TokenIdentity {
  /** EIP-55 checksummed. */
  address: string;
  name: string | null;
  symbol: string | null;
  decimals: number | null;
}

export interface MarketPair {
  /** The DEX as the provider names it (DexScreener dexId, GeckoTerminal dex id). */
  dex: string;
  pairAddress: string;
  quoteToken: { address: string; symbol: string };
  liquidityUsd: string | null;
  /** ISO 8601, or null when the provider does not know. */
  createdAt: string | null;
}

export interface MarketSnapshot {
  provider: ProviderName;
  token: TokenIdentity;
  priceUsd: string;
  liquidityUsd: string | null;
  volume24hUsd: string | null;
  fdvUsd: string | null;
  marketCapUsd: string | null;
  priceChange24hPct: string | null;
  /** Pairs where the token is the BASE token, most liquid first (at most MAX_PAIRS). */
  pairs: MarketPair[];
  fetchedAt: Date;
}

export const MAX_PAIRS = 5;

/**
 * What one provider said about one token:
 * - `market`: a usable snapshot;
 * - `none`: an authoritative "this token has no Base market" (GeckoTerminal's 404 for the token);
 * - `empty`: DexScreener's empty pair list. It is DexScreener's answer for an unknown token AND
 *   a known transient quirk for listed tokens, so on its own it never proves "no market".
 * Anything else (transport error, timeout, HTTP error, a quirk in the body) is thrown as a
 * ProviderError.
 */
export type ProviderOutcome =
  | { kind: 'market'; snapshot: MarketSnapshot }
  | { kind: 'none' }
  | { kind: 'empty' };

export interface MarketProvider {
  readonly name: ProviderName;
  /** `address` is lower-case 0x + 40 hex. */
  lookup(address: string): Promise<ProviderOutcome>;
}

export type ProviderFailureKind =
  | 'network'
  | 'timeout'
  | 'http_status'
  | 'invalid_json'
  | 'too_large'
  | 'shape'
  | 'pairs_null'
  | 'empty_list'
  | 'quote_token_only'
  | 'token_mismatch';

/** A provider failed or answered with a quirk. `detail` is for logs only, never for callers. */
export class ProviderError extends Error {
  override name = 'ProviderError';
  constructor(
    readonly provider: ProviderName,
    readonly kind: ProviderFailureKind,
    readonly detail: string,
    /** Worth another attempt (transport errors, timeouts, 5xx, 429); quirks in a 200 are not. */
    readonly retryable = false,
  ) {
    super(`${provider}: ${kind}: ${detail}`);
  }
}
