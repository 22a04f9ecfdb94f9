import { randomBytes } from 'node:crypto';
import type { FastifyServerOptions } from 'fastify';
import { Redis } from 'ioredis';
import { buildApp, type App } from '../../src/app.js';
import { testConfig, type Config } from '../../src/config.js';
import { ManualClock } from '../../src/platform/clock.js';
import { createRateLimiter } from '../../src/platform/rate-limit.js';
import { createTestDatabase, sharedDatabase, type TestDatabase } from './db.js';
import { suiteFixture } from './suite.js';

/**
 * Tests never reach the internet: everything that would talk to Base, a facilitator or a
 * market-data provider points at a closed loopback port unless the test gives a stand-in.
 */
const DEAD = 'http://127.0.0.1:9';
export const OFFLINE: Partial<Config> = { rpcUrls: [DEAD], facilitatorUrl: DEAD, marketDexscreenerUrl: DEAD, marketGeckoterminalUrl: DEAD };

export interface TestApp {
  app: App;
  database: TestDatabase;
  clock: ManualClock;
  config: Config;
  close(): Promise<void>;
}

export interface TestAppOptions {
  config?: Partial<Config>;
  clock?: ManualClock;
  /** Share this database instead of creating one (a second instance of the service). */
  database?: TestDatabase;
  /** Share rate limits through this Redis, under this key prefix. */
  redis?: { client: Redis; keyPrefix: string };
  /** Logger options (loggerOptions with a stream, say); silent by default. */
  logger?: FastifyServerOptions['logger'];
}

/** The whole service on a fresh database, driven with inject(); rate limits off unless asked. */
export async function createTestApp(opts: TestAppOptions = {}): Promise<TestApp> {
  const config = testConfig({ rateLimits: false, logLevel: 'silent', ...OFFLINE, ...opts.config });
  const database = opts.database ?? (await createTestDatabase());
  const clock = opts.clock ?? new ManualClock();
  const limiter = createRateLimiter(
    config,
    opts.redis ? { redis: opts.redis.client, keyPrefix: opts.redis.keyPrefix } : { keyPrefix: `t${randomBytes(4).toString('hex')}` },
  );
  const app = await buildApp({ config, database, clock, limiter, logger: opts.logger ?? false });
  await app.ready();
  return {
    app,
    database,
    clock,
    config,
    async close() {
      await app.close();
      if (!opts.database) await database.drop();
    },
  };
}

/**
 * Two service instances sharing one database, as behind a load balancer: `b` opens its own
 * connections to `a`'s database (and PostgreSQL schema). close() ends both.
 */
export async function createTwoTestApps(): Promise<{ a: TestApp; b: TestApp; close(): Promise<void> }> {
  const a = await createTestApp();
  const shared = await sharedDatabase(a.database);
  const b = await createTestApp({ database: shared });
  return {
    a,
    b,
    async close() {
      await b.close();
      await shared.close();
      await a.close();
    },
  };
}

/** Two instances on one database for the enclosing describe block: made before its tests, closed after. */
export function useTwoTestApps(): { readonly a: TestApp; readonly b: TestApp } {
  return suiteFixture(createTwoTestApps);
}

export const ADDR = {
  alice: '0x1111111111111111111111111111111111111111',
  bob: '0x2222222222222222222222222222222222222222',
  carol: '0x3333333333333333333333333333333333333333',
  mixedCase: '0xabCDeF0123456789AbcdEf0123456789aBCDEF01',
} as const;

/** Parses a JSON response body, failing the test with the raw text when it is not JSON. */
export function json<T = any>(res: { body: string }): T {
  return JSON.parse(res.body) as T;
}

/**
 * Like createTestApp, but lets the test add routes or hooks to the built app before it is made
 * ready (for example stand-ins for routes a later issue adds, so the catalogue lists them).
 */
export async function createTestAppWith(
  beforeReady: (app: App) => void | Promise<void>,
  opts: Omit<TestAppOptions, 'database' | 'redis'> = {},
): Promise<TestApp> {
  const config = testConfig({ rateLimits: false, logLevel: 'silent', ...OFFLINE, ...opts.config });
  const database = await createTestDatabase();
  const clock = opts.clock ?? new ManualClock();
  const limiter = createRateLimiter(config, { keyPrefix: `t${randomBytes(4).toString('hex')}` });
  let app: App | undefined;
  try {
    app = await buildApp({ config, database, clock, limiter, logger: opts.logger ?? false });
    await beforeReady(app);
    await app.ready();
  } catch (err) {
    await app?.close().catch(() => {});
    await database.drop();
    throw err;
  }
  const built = app;
  return {
    app: built,
    database,
    clock,
    config,
    async close() {
      await built.close();
      await database.drop();
    },
  };
}
