import { Redis } from 'ioredis';
import type { Config } from '../config.js';
import { systemClock, type Clock } from './clock.js';
import { openDatabase, type Database } from './db/database.js';
import { createRateLimiter, type RateLimiter } from './rate-limit.js';

export interface Infrastructure {
  config: Config;
  database: Database;
  clock: Clock;
  limiter: RateLimiter;
  redis?: Redis;
  close(): Promise<void>;
}

/** Opens everything the service talks to, from configuration. */
export async function openInfrastructure(config: Config, clock: Clock = systemClock): Promise<Infrastructure> {
  const database = await openDatabase(config.databaseUrl);
  // enableOfflineQueue:false makes a Redis outage fail fast into the in-process insurance limiter.
  const redis = config.redisUrl ? new Redis(config.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 }) : undefined;
  redis?.on('error', () => {});
  const limiter = createRateLimiter(config, redis ? { redis } : {});
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
