import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import { ConfigError, type Config } from '../config.js';
import { systemClock, type Clock } from './clock.js';
import { openDatabase, sqliteFileOf, type Database } from './db/database.js';
import { createRateLimiter, type RateLimiter } from './rate-limit.js';
import { checkCdpKey } from './x402.js';

export interface Infrastructure {
  config: Config;
  database: Database;
  clock: Clock;
  limiter: RateLimiter;
  redis?: Redis;
  close(): Promise<void>;
}

/**
 * How long a rate-limit command may wait for Redis before the in-process insurance limiter
 * answers instead. Redis answers in well under a millisecond; one that accepts commands but
 * never answers (stopped, swapping) would otherwise hold every rate-limited request forever.
 */
export const REDIS_COMMAND_TIMEOUT_MS = 500;

/**
 * The Redis client of the rate limits. A Redis outage fails fast into the in-process insurance
 * limiter: enableOfflineQueue:false refuses commands while disconnected, and commandTimeout
 * gives up on a Redis that is connected but does not answer.
 */
export function connectRedis(url: string, opts: { lazyConnect?: boolean } = {}): Redis {
  const redis = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: REDIS_COMMAND_TIMEOUT_MS, ...opts });
  redis.on('error', (err: Error) => {
    // A database index this Redis does not have: ioredis reports its refused SELECT and then
    // runs every command on database 0, where another deployment's counts may live. Such a
    // client is closed instead, so that its counts are taken in process (see openInfrastructure).
    if (isRefusedDatabase(err)) redis.disconnect();
  });
  return redis;
}

const isRefusedDatabase = (err: Error) => /DB index is out of range/i.test(err.message);

/** How long a start waits for Redis to accept or refuse the configured database; an unreachable Redis does not hold the start. */
const REDIS_START_CHECK_MS = 2_000;

/**
 * Resolves once Redis has selected the configured database, or is not answering (the service then
 * starts with per-instance counts, as on any Redis outage); a ConfigError when Redis refused the
 * database index, which no retry mends.
 */
async function checkRedisDatabase(redis: Redis): Promise<void> {
  const refused = await new Promise<Error | undefined>((settle) => {
    const timer = setTimeout(() => done(undefined), REDIS_START_CHECK_MS);
    const onError = (err: Error) => (isRefusedDatabase(err) ? done(err) : undefined);
    const onReady = () => done(undefined);
    function done(err: Error | undefined) {
      clearTimeout(timer);
      redis.off('error', onError);
      redis.off('ready', onReady);
      settle(err);
    }
    redis.on('error', onError);
    redis.once('ready', onReady);
  });
  // connectRedis has closed the client already.
  if (refused) {
    throw new ConfigError(`REDIS_URL: this Redis has no database ${redis.options.db} (${refused.message}); name one it has, such as redis://…/0`);
  }
}

/** The setting, and the file (an SQLite URL holds no secret; a PostgreSQL one may). */
function databaseSetting(config: Config): string {
  const file = sqliteFileOf(config.databaseUrl);
  return file === undefined ? 'DATABASE_URL' : `DATABASE_URL=sqlite:${resolve(file)}`;
}

/**
 * A start that met an SQLite file another process holds the write lock of, said with the file and
 * what to do; undefined for any other failure.
 */
export function lockedDatabase(err: unknown, config: Config, what = ''): ConfigError | undefined {
  if (!causedBy(err, (code) => code.startsWith('SQLITE_BUSY'))) return undefined;
  return new ConfigError(
    `${what}${databaseSetting(config)}: ${messageOf(err)}: another process holds its write lock (another paywarden on the same file, an open sqlite3 session); stop it, or give this instance its own DATABASE_URL`,
  );
}

/** Whether the error, or one of the errors it wraps (`cause`, a few deep), has a code that `matches`. */
function causedBy(err: unknown, matches: (code: string) => boolean): boolean {
  let e = err as { code?: unknown; cause?: unknown } | undefined;
  for (let depth = 0; e && depth < 5; depth++, e = e.cause as typeof e) if (typeof e.code === 'string' && matches(e.code)) return true;
  return false;
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Opens everything the service talks to, from configuration. */
export async function openInfrastructure(config: Config, clock: Clock = systemClock): Promise<Infrastructure> {
  await checkCdpKey(config);
  const database = await openDatabase(config.databaseUrl).catch((err: unknown) => {
    throw lockedDatabase(err, config, 'cannot open ') ?? new ConfigError(`cannot open ${databaseSetting(config)}: ${messageOf(err)}`);
  });
  const redis = config.redisUrl ? connectRedis(config.redisUrl) : undefined;
  if (redis) {
    await checkRedisDatabase(redis).catch(async (err: unknown) => {
      await database.close();
      throw err;
    });
  }
  const limiter = createRateLimiter(config, redis ? { redis, keyPrefix: config.redisKeyPrefix } : {});
  return {
    config,
    database,
    clock,
    limiter,
    ...(redis ? { redis } : {}),
    async close() {
      redis?.disconnect();
      await database.close();
    },
  };
}

const REDIS_WARNING_INTERVAL_MS = 60 * 1000;

/**
 * While Redis fails, every instance counts its own limits (the in-process insurance limiter):
 * says so, once a minute at most while it lasts. Both ways count: the client's connection errors,
 * and commands that a connected Redis refuses (OOM at maxmemory, NOPERM for an ACL user without
 * scripting) or does not answer in time, which its client reports nowhere.
 */
export function warnWhileRedisFails(infra: Pick<Infrastructure, 'redis' | 'limiter'>, log: { warn(obj: object, msg: string): void }): void {
  if (!infra.redis) return;
  let warnedAt = -Infinity;
  const warn = (err?: Error) => {
    if (performance.now() - warnedAt < REDIS_WARNING_INTERVAL_MS) return;
    warnedAt = performance.now();
    log.warn(err ? { err } : {}, 'Redis unavailable: rate limits are counted per instance until it is back');
  };
  infra.redis.on('error', (err: Error) => warn(err));
  infra.limiter.onFallback(() => warn());
}
