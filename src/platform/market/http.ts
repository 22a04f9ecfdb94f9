import { withRetry } from 'viem';
import { BodyTooLargeError, boundedFetch } from '../bounded-fetch.js';
import { ProviderError, type ProviderName } from './types.js';

/**
 * The one timeout-and-retry policy of the market-data providers.
 *
 * Every request has its own deadline (`timeoutMs`, covering the response body too). A request
 * that failed in a way worth repeating (connection error, timeout, HTTP 5xx or 429) is tried
 * once more after `retryDelayMs`; a quirk inside a 200 answer (wrong types, empty list, the
 * token only as quote token) is not repeated: the same provider would most likely say the same,
 * and failing over to the next provider is the better use of the caller's time. The retry loop
 * is viem's `withRetry`, the same helper viem's own HTTP transport (our Base RPC client) uses, so
 * there is no hand-rolled retry code here.
 *
 * Worst case per provider: 2 x timeoutMs + retryDelayMs.
 */
export interface HttpPolicy {
  timeoutMs: number;
  /** Extra attempts after the first (default 1). */
  retryCount?: number;
  /** Wait before the retry (default 200 ms). */
  retryDelayMs?: number;
}

export interface JsonAnswer {
  status: number;
  body: unknown;
}

const isTimeout = (e: unknown) =>
  typeof e === 'object' && e !== null && 'name' in e && ((e as Error).name === 'TimeoutError' || (e as Error).name === 'AbortError');

/** Longest answer read from a market-data provider: one token's pairs are tens of kilobytes. */
export const MAX_MARKET_BODY_BYTES = 2 * 1024 * 1024;
const readBounded = boundedFetch(MAX_MARKET_BODY_BYTES);

/**
 * GET `url` and parse JSON. Statuses for which `accept` is false are failures (retryable when
 * 5xx or 429). The caller decides what an accepted non-200 (GeckoTerminal's 404) means.
 */
export function getJson(
  provider: ProviderName,
  url: string,
  policy: HttpPolicy,
  accept: (status: number) => boolean = (s) => s === 200,
): Promise<JsonAnswer> {
  const attempt = async (): Promise<JsonAnswer> => {
    const signal = AbortSignal.timeout(policy.timeoutMs);
    let status: number;
    let text: string;
    try {
      const res = await readBounded(url, { headers: { accept: 'application/json' }, signal });
      status = res.status;
      text = await res.text();
    } catch (e) {
      if (e instanceof BodyTooLargeError) throw new ProviderError(provider, 'too_large', e.message);
      if (isTimeout(e)) throw new ProviderError(provider, 'timeout', `no answer within ${policy.timeoutMs} ms`, true);
      throw new ProviderError(provider, 'network', e instanceof Error ? e.message : String(e), true);
    }
    if (!accept(status)) {
      throw new ProviderError(provider, 'http_status', `HTTP ${status}`, status >= 500 || status === 429);
    }
    try {
      return { status, body: JSON.parse(text) as unknown };
    } catch {
      throw new ProviderError(provider, 'invalid_json', `HTTP ${status} with a body that is not JSON`);
    }
  };
  const delay = policy.retryDelayMs ?? 200;
  return withRetry(attempt, {
    retryCount: policy.retryCount ?? 1,
    delay: () => delay,
    shouldRetry: ({ error }) => error instanceof ProviderError && error.retryable,
  });
}
