import type { FastifyBaseLogger } from 'fastify';
import { ageMs, type Clock } from '../../platform/clock.js';
import { AppError } from '../../platform/errors.js';
import { MarketUnavailableError, type MarketData } from '../../platform/market/failover.js';
import type { MarketSnapshot, ProviderName, TokenIdentity } from '../../platform/market/types.js';
import { tokenText } from '../../platform/token-metadata.js';
import type { TokenChainReader } from './chain-reader.js';

/**
 * A token's market as the FREE tools may show it, with the specification's staleness rules:
 *
 * - a provider answer is reused for FRESH_SECONDS (the providers themselves cache about a
 *   minute), so a busy token costs one upstream lookup per FRESH_SECONDS, shared by concurrent
 *   requests (single flight);
 * - when every provider fails, the last good answer's market metrics are served for at most
 *   STALE_MARKET_SECONDS after it was fetched (`stale: true`); after that the metrics are
 *   withheld (`limited: true`) and only the token identity is served, for at most
 *   STALE_IDENTITY_SECONDS; beyond that the answer is 502;
 * - a clean "no market" from the providers (see MarketData) is a 404 and forgets the last good
 *   answer;
 * - after a failed refresh the providers are not asked again about that token for
 *   RETRY_AFTER_FAILURE_SECONDS, so an outage does not make every preview wait for timeouts.
 *
 * Everything is kept IN MEMORY, PER INSTANCE: several instances behind a load balancer each have
 * their own last good answers (a restarted instance has none, and answers 502 during an outage
 * until the providers are back). Ages come from the injected clock. Paid reports never use this
 * (they call MarketData.lookup directly).
 */
export const FRESH_SECONDS = 30;
export const STALE_MARKET_SECONDS = 900;
export const STALE_IDENTITY_SECONDS = 86_400;
export const RETRY_AFTER_FAILURE_SECONDS = 10;
/** A preview does not wait longer than this for the Base identity read; a late answer is still kept for next time. */
export const IDENTITY_WAIT_MS = 3000;
const MAX_TOKENS = 10_000;

export interface MarketView {
  token: TokenIdentity;
  /** null when the metrics are withheld (limited). */
  snapshot: MarketSnapshot | null;
  provider: ProviderName;
  fetchedAt: Date;
  ageSeconds: number;
  stale: boolean;
  limited: boolean;
}

interface Entry {
  snapshot: MarketSnapshot;
  identity: TokenIdentity;
}

type Refresh = { kind: 'market' } | { kind: 'none' } | { kind: 'unavailable'; error: MarketUnavailableError };

/** Map.set that keeps at most MAX_TOKENS keys, forgetting the least recently written. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > MAX_TOKENS) map.delete(map.keys().next().value!);
}

export const noTradingPair = () =>
  new AppError('no_trading_pair', 'No market-data provider lists a Base trading pair with this token as its base token.');

function unavailable(cause?: MarketUnavailableError): AppError {
  const err = new AppError('upstream_unavailable', 'The market-data providers are unavailable and no recent answer for this token is kept; try again later.');
  if (cause) err.cause = cause;
  return err;
}

export class TokenMarketView {
  private readonly good = new Map<string, Entry>();
  private readonly none = new Map<string, number>();
  private readonly failedAt = new Map<string, number>();
  private readonly identities = new Map<string, { name: string | null; symbol: string | null; decimals: number | null; at: number }>();
  private readonly inflight = new Map<string, Promise<Refresh>>();

  constructor(
    private readonly market: MarketData,
    private readonly chain: TokenChainReader,
    private readonly clock: Clock,
    private readonly log?: FastifyBaseLogger,
  ) {}

  /** Throws AppError no_trading_pair (404) or upstream_unavailable (502). */
  async get(address: string): Promise<MarketView> {
    const key = address.toLowerCase();
    let now = this.clock.now().getTime();
    const entry = this.good.get(key);
    if (entry && ageMs(now, entry.snapshot.fetchedAt.getTime()) < FRESH_SECONDS * 1000) return this.view(entry, now, 'fresh');
    const noneAt = this.none.get(key);
    if (noneAt !== undefined && ageMs(now, noneAt) < FRESH_SECONDS * 1000) throw noTradingPair();
    const failed = this.failedAt.get(key);
    if (failed !== undefined && ageMs(now, failed) < RETRY_AFTER_FAILURE_SECONDS * 1000) return this.fallback(key, now);

    const result = await this.refresh(key);
    now = this.clock.now().getTime();
    if (result.kind === 'none') throw noTradingPair();
    if (result.kind === 'unavailable') return this.fallback(key, now, result.error);
    const fresh = this.good.get(key);
    if (!fresh) throw unavailable();
    return this.view(fresh, now, 'fresh');
  }

  private refresh(key: string): Promise<Refresh> {
    let pending = this.inflight.get(key);
    if (!pending) {
      pending = this.lookup(key).finally(() => this.inflight.delete(key));
      this.inflight.set(key, pending);
    }
    return pending;
  }

  private async lookup(key: string): Promise<Refresh> {
    let found;
    try {
      found = await this.market.lookup(key);
    } catch (e) {
      if (!(e instanceof MarketUnavailableError)) throw e;
      remember(this.failedAt, key, this.clock.now().getTime());
      this.log?.warn({ token: key, attempts: e.attempts }, 'market data unavailable');
      return { kind: 'unavailable', error: e };
    }
    this.failedAt.delete(key);
    if (found.kind === 'none') {
      this.good.delete(key);
      remember(this.none, key, this.clock.now().getTime());
      return { kind: 'none' };
    }
    this.none.delete(key);
    const identity = await this.identity(key, found.snapshot.token);
    remember(this.good, key, { snapshot: found.snapshot, identity });
    return { kind: 'market' };
  }

  /** The provider's identity, completed from Base where the provider lacks a field (DexScreener has no decimals). */
  private async identity(key: string, provided: TokenIdentity): Promise<TokenIdentity> {
    // A provider relays whatever the token calls itself: its labels are cleaned like those read on chain.
    const fromProvider = { ...provided, name: provided.name === null ? null : tokenText(provided.name), symbol: provided.symbol === null ? null : tokenText(provided.symbol) };
    if (fromProvider.name !== null && fromProvider.symbol !== null && fromProvider.decimals !== null) return fromProvider;
    const now = this.clock.now().getTime();
    let onChain = this.identities.get(key);
    if (!onChain || ageMs(now, onChain.at) > STALE_IDENTITY_SECONDS * 1000) {
      const read = this.chain.identity(key).then(
        (identity) => {
          const entry = { ...identity, at: this.clock.now().getTime() };
          remember(this.identities, key, entry);
          return entry;
        },
        (err: unknown) => {
          // The market is still worth showing; the missing fields stay null and are read next time.
          this.log?.warn({ token: key, err: (err as Error).cause ?? err }, 'token identity could not be read on Base');
          return undefined;
        },
      );
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<undefined>((resolve) => {
        timer = setTimeout(resolve, IDENTITY_WAIT_MS, undefined);
      });
      onChain = await Promise.race([read, late]);
      clearTimeout(timer);
      if (!onChain) return fromProvider;
    }
    return {
      address: fromProvider.address,
      name: fromProvider.name ?? onChain.name,
      symbol: fromProvider.symbol ?? onChain.symbol,
      decimals: fromProvider.decimals ?? onChain.decimals,
    };
  }

  private fallback(key: string, now: number, cause?: MarketUnavailableError): MarketView {
    const entry = this.good.get(key);
    if (!entry) throw unavailable(cause);
    const age = ageMs(now, entry.snapshot.fetchedAt.getTime());
    if (age <= STALE_MARKET_SECONDS * 1000) return this.view(entry, now, 'stale');
    if (age <= STALE_IDENTITY_SECONDS * 1000) return this.view(entry, now, 'limited');
    this.good.delete(key);
    throw unavailable(cause);
  }

  private view(entry: Entry, now: number, mode: 'fresh' | 'stale' | 'limited'): MarketView {
    const fetchedAt = entry.snapshot.fetchedAt;
    return {
      token: entry.identity,
      snapshot: mode === 'limited' ? null : entry.snapshot,
      provider: entry.snapshot.provider,
      fetchedAt,
      ageSeconds: Math.max(0, Math.floor((now - fetchedAt.getTime()) / 1000)),
      stale: mode !== 'fresh',
      limited: mode === 'limited',
    };
  }
}
