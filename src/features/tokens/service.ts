import type { FastifyBaseLogger } from 'fastify';
import { ageMs, type Clock } from '../../platform/clock.js';
import type { MarketData } from '../../platform/market/failover.js';
import type { TokenChainReader } from './chain-reader.js';
import { COVERAGE_CACHE_SECONDS, coverageOf, type CoverageResponse } from './coverage.js';
import { TokenMarketView } from './market-view.js';
import { previewBody, type PreviewResponse } from './preview.js';

/** What the token tools can be given instead of building from configuration (tests, benchmarks, the devnet). */
export interface MarketDeps {
  /** Providers with failover; default: DexScreener then GeckoTerminal at the configured URLs. */
  data?: MarketData;
  /** Base reads; default: the app's ChainClient. */
  chain?: TokenChainReader;
}

const MAX_CACHED = 10_000;

/** The free token preview and coverage check over one in-memory market view (per instance). */
export class TokenTools {
  readonly view: TokenMarketView;
  private readonly coverageCache = new Map<string, { body: CoverageResponse; at: number }>();

  constructor(
    market: MarketData,
    private readonly chain: TokenChainReader,
    private readonly clock: Clock,
    log?: FastifyBaseLogger,
  ) {
    this.view = new TokenMarketView(market, chain, clock, log);
  }

  async preview(address: string): Promise<PreviewResponse> {
    return previewBody(await this.view.get(address));
  }

  /**
   * Reused for up to COVERAGE_CACHE_SECONDS per token. Only answers whose Base reads succeeded
   * are kept: "Base could not be read" is worth asking again at once.
   */
  async coverage(address: string): Promise<CoverageResponse> {
    const key = address.toLowerCase();
    const cached = this.coverageCache.get(key);
    if (cached && ageMs(this.clock.now().getTime(), cached.at) <= COVERAGE_CACHE_SECONDS * 1000) return cached.body;
    // In sequence: a token without a market (404) or an outage (502) costs no Base request.
    const view = await this.view.get(key);
    const [facts, pool] = await Promise.all([this.chain.contract(key).catch(() => null), this.chain.pool(key).catch(() => null)]);
    const checkedAt = this.clock.now();
    const body = coverageOf(view, facts, pool, checkedAt);
    if (facts !== null && pool !== null) {
      this.coverageCache.delete(key);
      this.coverageCache.set(key, { body, at: checkedAt.getTime() });
      if (this.coverageCache.size > MAX_CACHED) this.coverageCache.delete(this.coverageCache.keys().next().value!);
    }
    return body;
  }
}
