import type { FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import ipaddr from 'ipaddr.js';
import {
  RateLimiterMemory,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';
import type { Config } from '../config.js';
import { AppError } from './errors.js';

export interface Limit {
  points: number;
  durationSeconds: number;
  /** Title of the 429, in the specification's words where it has them. */
  title: string;
}

/** Every per-source limit of the service, in one table. */
export function rateLimitTable(config: Config) {
  return {
    evaluate: { points: 120, durationSeconds: 3600, title: 'Per-source free evaluation limit reached' },
    tokenPreview: { points: 60, durationSeconds: 3600, title: 'Per-source free preview limit reached' },
    tokenCoverage: { points: 60, durationSeconds: 3600, title: 'Per-source free coverage limit reached' },
    pilotLeads: { points: config.leadLimit, durationSeconds: 3600, title: 'Rate limit reached' },
    policyCreate: { points: config.policyCreateLimit, durationSeconds: 86400, title: 'Free pilot creation limit reached' },
    // Anyone may create an order, and each stores a report input of up to 64 KiB.
    orderCreate: { points: config.orderLimit, durationSeconds: 3600, title: 'Recovery order limit reached' },
    // Counted when the facilitator refuses a payment (each costs a facilitator call, which the
    // operator's facilitator quota pays for); checked before the next one is sent there.
    refusedPayments: { points: config.refusedPaymentLimit, durationSeconds: 3600, title: 'Refused payment limit reached' },
    // Counted per policy (the source is `policy:<policyId>`), not per address.
    evidence: { points: config.evidenceLimit, durationSeconds: 3600, title: 'Evidence request limit reached' },
  } satisfies Record<string, Limit>;
}

export type LimitName = keyof ReturnType<typeof rateLimitTable>;

export interface RateLimiter {
  /** Counts one request of `source` against `name`; throws a 429 AppError when over the limit. */
  consume(name: LimitName, source: string): Promise<void>;
  /**
   * Counts one against `name` for `source` (the 429 of `name` when none is left), and returns
   * the way to give it back: for a limit on outcomes, counted before the outcome is known so that
   * concurrent requests cannot all pass, and given back when the outcome is not one it limits.
   */
  reserve(name: LimitName, source: string): Promise<() => Promise<void>>;
  /**
   * Calls `listener` whenever Redis did not carry out a count (it failed, refused the command, or
   * did not answer in time) and the in-process insurance limiter counted instead: a Redis that
   * answers OOM or NOPERM to every command is connected, so its client reports no error.
   */
  onFallback(listener: () => void): void;
  /**
   * Route hooks (onRequest or preHandler) counting the request's source against `name`: none at
   * all when rate limits are off, so a benchmark measures the route, not an empty hook.
   */
  hook(name: LimitName): Array<(request: FastifyRequest) => Promise<void>>;
}

export interface RateLimiterOptions {
  redis?: Redis;
  /** Redis key prefix (REDIS_KEY_PREFIX); tests give each run its own so runs never share counters by accident. */
  keyPrefix?: string;
}

const DEFAULT_REDIS_KEY_PREFIX = 'paywarden:rl';

/** The in-process limiter that counts when Redis does not: it tells `used` each time. */
class InsuranceLimiter extends RateLimiterMemory {
  constructor(
    opts: ConstructorParameters<typeof RateLimiterMemory>[0],
    private readonly used: () => void,
  ) {
    super(opts);
  }

  override consume(...args: Parameters<RateLimiterMemory['consume']>): Promise<RateLimiterRes> {
    this.used();
    return super.consume(...args);
  }
}

/**
 * In-process counters by default; with Redis, every instance of the service shares one count
 * per source. Should Redis fail, an in-process insurance limiter keeps limits in force rather
 * than letting every request through or failing them all.
 */
export function createRateLimiter(config: Config, opts: RateLimiterOptions = {}): RateLimiter {
  const table = rateLimitTable(config);
  const prefix = opts.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX;
  const fallbackListeners: Array<() => void> = [];
  const fellBack = () => {
    for (const listener of fallbackListeners) listener();
  };
  const limiters = new Map<LimitName, RateLimiterAbstract>();
  for (const [name, limit] of Object.entries(table) as Array<[LimitName, Limit]>) {
    const base = { points: limit.points, duration: limit.durationSeconds, keyPrefix: `${prefix}:${name}` };
    limiters.set(
      name,
      opts.redis
        ? new RateLimiterRedis({ ...base, storeClient: opts.redis, insuranceLimiter: new InsuranceLimiter(base, fellBack) })
        : new RateLimiterMemory(base),
    );
  }

  const limited = (name: LimitName, res: RateLimiterRes) => {
    // Never more than the window: the in-process limiter counts down from a wall-clock time, which
    // a system clock stepped back would otherwise stretch (its own timer still ends the window).
    const retryAfter = Math.min(table[name].durationSeconds, Math.max(1, Math.ceil(res.msBeforeNext / 1000)));
    return new AppError('rate_limited', `limit of ${table[name].points} requests per ${table[name].durationSeconds} s per source; retry after ${retryAfter} s`, {
      title: table[name].title,
      retryAfter,
    });
  };

  async function consume(name: LimitName, source: string): Promise<RateLimiterRes | undefined> {
    if (!config.rateLimits) return undefined;
    try {
      return await limiters.get(name)!.consume(source);
    } catch (rej) {
      if (!(rej instanceof RateLimiterRes)) throw rej;
      throw limited(name, rej);
    }
  }

  return {
    consume: async (name, source) => void (await consume(name, source)),
    async reserve(name, source) {
      const res = await consume(name, source);
      if (!res) return async () => {};
      // The count lives in the window it was taken in. Given back after that window ended (a
      // verify outlasting the hour), it would be taken off the next window's count instead and
      // raise that hour's limit by one; the old window is gone, so there is nothing to give back.
      // A second's margin for the two clocks (this process's, and Redis's expiry).
      const windowEnds = performance.now() + res.msBeforeNext - 1000;
      // A count not given back (Redis failing mid-call) costs one count; it never fails the request.
      return async () => {
        if (performance.now() >= windowEnds) return;
        await limiters.get(name)!.reward(source, 1).catch(() => undefined);
      };
    },
    hook: (name) => (config.rateLimits ? [async (request) => void (await consume(name, sourceOf(request.ip)))] : []),
    onFallback: (listener) => void fallbackListeners.push(listener),
  };
}

const IPV4_WITH_PORT = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/;
const BRACKETED_V6 = /^\[([^\]]+)\](?::\d{1,5})?$/;

/**
 * The source a per-source limit counts: an IPv4 address (also when it arrives IPv4-mapped), or
 * the /64 network of an IPv6 address. A subscriber is given a whole /64 and can pick any address
 * in it, so counting single IPv6 addresses would let one caller spread its requests over as many
 * limits as it likes.
 */
export function sourceOf(ip: string): string {
  // Some proxies write X-Forwarded-For with the client's port (Azure Application Gateway:
  // 203.0.113.7:50123, [2001:db8::1]:50123): a new port per connection must not be a new source.
  const unported = IPV4_WITH_PORT.exec(ip)?.[1] ?? BRACKETED_V6.exec(ip)?.[1] ?? ip;
  const bare = unported.split('%')[0]!; // a zone index (fe80::1%eth0) names an interface, not a host
  if (!ipaddr.isValid(bare)) return ip;
  const addr = ipaddr.parse(bare);
  if (addr.kind() === 'ipv4') return addr.toString();
  const v6 = addr as ipaddr.IPv6;
  if (v6.isIPv4MappedAddress()) return v6.toIPv4Address().toString();
  return `${v6.parts.slice(0, 4).map((part) => part.toString(16)).join(':')}::/64`;
}
