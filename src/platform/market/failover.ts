import type { Config } from '../../config.js';
import type { Clock } from '../clock.js';
import { DexScreenerProvider } from './dexscreener.js';
import { GeckoTerminalProvider } from './geckoterminal.js';
import type { HttpPolicy } from './http.js';
import { ProviderError, type MarketProvider, type MarketSnapshot, type ProviderName } from './types.js';

/** How one provider's attempt ended, for logs and for the decision between 404 and 502. */
export interface Attempt {
  provider: ProviderName;
  outcome: 'market' | 'none' | 'empty' | 'failed';
  /** ProviderError kind (failed only). */
  failure?: string;
  detail?: string;
}

export type MarketLookup = { kind: 'market'; snapshot: MarketSnapshot; attempts: Attempt[] } | { kind: 'none'; attempts: Attempt[] };

/** Every provider failed (or answered with a quirk), so neither a market nor a clean "none" is known. */
export class MarketUnavailableError extends Error {
  override name = 'MarketUnavailableError';
  constructor(readonly attempts: Attempt[]) {
    super(`market data unavailable: ${attempts.map((a) => `${a.provider} ${a.outcome}${a.failure ? ` (${a.failure}: ${a.detail})` : ''}`).join('; ')}`);
  }
}

/**
 * Failover over the providers in order: the first market wins. "No market" is answered only when
 * no provider failed and at least one said so authoritatively (GeckoTerminal's 404); DexScreener's
 * empty list alone is not proof (it is also a known transient quirk), and a failure anywhere
 * makes the answer "unavailable" (502), never "no market" (404).
 */
export class MarketData {
  constructor(readonly providers: readonly MarketProvider[]) {
    if (providers.length === 0) throw new Error('MarketData: at least one provider is required');
  }

  /** Fresh data only (no cache, no stale fallback): what paid reports use. Throws MarketUnavailableError. */
  async lookup(address: string): Promise<MarketLookup> {
    const token = address.toLowerCase();
    const attempts: Attempt[] = [];
    for (const provider of this.providers) {
      try {
        const outcome = await provider.lookup(token);
        attempts.push({ provider: provider.name, outcome: outcome.kind });
        if (outcome.kind === 'market') return { kind: 'market', snapshot: outcome.snapshot, attempts };
      } catch (e) {
        if (!(e instanceof ProviderError)) throw e;
        attempts.push({ provider: provider.name, outcome: 'failed', failure: e.kind, detail: e.detail });
      }
    }
    const failed = attempts.some((a) => a.outcome === 'failed');
    const authoritative = attempts.some((a) => a.outcome === 'none');
    if (!failed && authoritative) return { kind: 'none', attempts };
    throw new MarketUnavailableError(attempts);
  }
}

export interface MarketDataOptions {
  /** Default 200 ms; tests shorten it. */
  retryDelayMs?: number;
}

/** DexScreener first, GeckoTerminal second, from configuration. */
export function createMarketData(
  config: Pick<Config, 'marketDexscreenerUrl' | 'marketGeckoterminalUrl' | 'marketTimeoutMs'>,
  clock: Clock,
  opts: MarketDataOptions = {},
): MarketData {
  const policy: HttpPolicy = { timeoutMs: config.marketTimeoutMs, retryCount: 1, retryDelayMs: opts.retryDelayMs ?? 200 };
  const now = () => clock.now();
  return new MarketData([
    new DexScreenerProvider(config.marketDexscreenerUrl, policy, now),
    new GeckoTerminalProvider(config.marketGeckoterminalUrl, policy, now),
  ]);
}
