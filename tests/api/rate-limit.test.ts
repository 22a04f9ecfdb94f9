import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { tcpRelay } from '../helpers/tcp-relay.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { expectProblem } from '../helpers/problems.js';
import { createBody, POLICIES } from '../helpers/policies.js';
import { createChainRaw, intentBody } from './evidence-helpers.js';
import { connectRedis, openInfrastructure, REDIS_COMMAND_TIMEOUT_MS, warnWhileRedisFails } from '../../src/platform/deps.js';
import { createRateLimiter, sourceOf } from '../../src/platform/rate-limit.js';
import { parseConfig, testConfig, type Config } from '../../src/config.js';

const EVALUATE_LIMIT = 120;

const evaluateBody = {
  agentId: 'agent-rl',
  requestId: 'req-rl',
  chain: 'base',
  asset: 'USDC',
  recipient: ADDR.alice,
  amount: '1',
  policy: {
    maxPerTransaction: '10',
    remainingDailyBudget: '10',
    requireHumanAbove: '10',
    maxRepeats: 1,
    allowedRecipients: [ADDR.alice],
    blockUnknownRecipients: true,
  },
};

const leadBody = {
  email: 'ops@example.com',
  company: 'Example Ltd',
  monthlyDecisions: '1k-10k',
  needs: 'We want to bound what our agents may spend.',
};

interface Source {
  remoteAddress: string;
  forwardedFor?: string;
}

function evaluate(t: TestApp, from: Source) {
  return t.app.inject({
    method: 'POST',
    url: '/api/spendpolicy/evaluate',
    payload: evaluateBody,
    remoteAddress: from.remoteAddress,
    headers: from.forwardedFor ? { 'x-forwarded-for': from.forwardedFor } : {},
  });
}

/** Sends `n` evaluations from one source and returns their status codes. */
async function evaluateTimes(t: TestApp, from: Source, n: number): Promise<number[]> {
  const codes: number[] = [];
  for (let i = 0; i < n; i++) codes.push((await evaluate(t, from)).statusCode);
  return codes;
}

function expectRateLimited(res: { statusCode: number; headers: Record<string, unknown>; body: string }) {
  const problem = expectProblem(res, 429, 'rate_limited');
  const retryAfter = String(res.headers['retry-after']);
  expect(retryAfter).toMatch(/^[1-9][0-9]*$/);
  expect(Number(retryAfter)).toBeLessThanOrEqual(3600);
  if (problem.retryAfter !== undefined) expect(problem.retryAfter).toBe(Number(retryAfter));
  return problem;
}

describe('per-source rate limits (in-process)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp({ config: { rateLimits: true, leadLimit: 3, orderLimit: 3 } });
  });
  afterAll(async () => {
    await t.close();
  });

  it('the 121st evaluation from one source within the hour is a 429 with Retry-After', async () => {
    const me = { remoteAddress: '198.51.100.1' };
    const codes = await evaluateTimes(t, me, EVALUATE_LIMIT);
    expect(codes.every((c) => c === 200)).toBe(true);
    const problem = expectRateLimited(await evaluate(t, me));
    expect(problem.title).toBe('Per-source free evaluation limit reached');
    // and it stays limited
    expectRateLimited(await evaluate(t, me));
  });

  it('other sources are not affected', async () => {
    const first = { remoteAddress: '198.51.100.2' };
    await evaluateTimes(t, first, EVALUATE_LIMIT);
    expectRateLimited(await evaluate(t, first));
    expect((await evaluate(t, { remoteAddress: '198.51.100.3' })).statusCode).toBe(200);
    expect((await evaluate(t, { remoteAddress: '2001:db8::1' })).statusCode).toBe(200);
  });

  it('invalid requests count against the limit too', async () => {
    const me = { remoteAddress: '198.51.100.4' };
    for (let i = 0; i < EVALUATE_LIMIT; i++) {
      const res = await t.app.inject({ method: 'POST', url: '/api/spendpolicy/evaluate', payload: { nope: true }, remoteAddress: me.remoteAddress });
      expect(res.statusCode).toBe(400);
    }
    expectRateLimited(await evaluate(t, me));
  });

  it('X-Forwarded-For is ignored when no proxy is trusted', async () => {
    const proxy = '10.0.0.5';
    // Every request claims a different client; all of them count against the proxy address.
    for (let i = 0; i < EVALUATE_LIMIT; i++) {
      expect((await evaluate(t, { remoteAddress: proxy, forwardedFor: `203.0.113.${i % 250}` })).statusCode).toBe(200);
    }
    expectRateLimited(await evaluate(t, { remoteAddress: proxy, forwardedFor: '203.0.113.251' }));
  });

  it('pilot leads answer 429 after config.leadLimit submissions from one source', async () => {
    const from = '198.51.100.9';
    const send = () => t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: leadBody, remoteAddress: from });
    for (let i = 0; i < t.config.leadLimit; i++) expect((await send()).statusCode).toBe(201);
    const problem = expectRateLimited(await send());
    expect(problem.title).toBe('Rate limit reached');
    expect((await t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: leadBody, remoteAddress: '198.51.100.10' })).statusCode).toBe(201);
  });

  it('pilot lead submissions refused as invalid (400) do not use up the limit', async () => {
    const from = '198.51.100.12';
    for (let i = 0; i < t.config.leadLimit; i++) {
      const res = await t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: { ...leadBody, needs: 'short' }, remoteAddress: from });
      expect(res.statusCode).toBe(400);
    }
    expect((await t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: leadBody, remoteAddress: from })).statusCode).toBe(201);
  });

  it('recovery orders answer 429 after config.orderLimit creations from one source', async () => {
    const order = (remoteAddress: string) =>
      t.app.inject({ method: 'POST', url: '/api/orders', payload: { path: '/api/quick-check', input: {} }, remoteAddress });
    const from = '198.51.100.20';
    for (let i = 0; i < t.config.orderLimit; i++) expect((await order(from)).statusCode).toBe(201);
    const problem = expectRateLimited(await order(from));
    expect(problem.title).toBe('Recovery order limit reached');
    expect((await order('198.51.100.21')).statusCode).toBe(201);
  });

  it('the evaluation and lead limits are counted separately', async () => {
    const from = '198.51.100.11';
    for (let i = 0; i < t.config.leadLimit; i++) {
      expect((await t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: leadBody, remoteAddress: from })).statusCode).toBe(201);
    }
    expect((await evaluate(t, { remoteAddress: from })).statusCode).toBe(200);
  });

  it('Retry-After counts down with the window', async () => {
    const me = { remoteAddress: '198.51.100.12' };
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      await evaluateTimes(t, me, EVALUATE_LIMIT);
      const first = Number((await evaluate(t, me)).headers['retry-after']);
      expect(first).toBeGreaterThan(3000);
      expect(first).toBeLessThanOrEqual(3600);
      vi.setSystemTime(Date.now() + 600_000);
      const later = await evaluate(t, me);
      expect(later.statusCode).toBe(429);
      // Ten minutes on, ten minutes less to wait (a second either way for rounding).
      expect(Math.abs(first - 600 - Number(later.headers['retry-after']))).toBeLessThanOrEqual(1);
      // Through the window's last seconds: the wait is rounded up, never "retry after 0".
      vi.setSystemTime(Date.now() + (first - 600) * 1000 - 2000);
      const waits: string[] = [];
      for (let res = await evaluate(t, me); res.statusCode === 429; res = await evaluate(t, me)) {
        waits.push(String(res.headers['retry-after']));
        vi.setSystemTime(Date.now() + 250);
      }
      expect(waits.length).toBeGreaterThan(4);
      expect(waits[1]).toBe('2'); // 1.75 s left
      expect(waits.at(-1)).toBe('1');
      expect(waits).not.toContain('0');
    } finally {
      vi.useRealTimers();
    }
  });

  it('Retry-After never exceeds the window, even after the system clock is stepped back', async () => {
    const me = { remoteAddress: '198.51.100.13' };
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      await evaluateTimes(t, me, EVALUATE_LIMIT);
      vi.setSystemTime(Date.now() - 2 * 3600_000);
      const res = await evaluate(t, me);
      expect(res.statusCode).toBe(429);
      expect(Number(res.headers['retry-after'])).toBeLessThanOrEqual(3600);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('the source of an IPv6 client', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp({ config: { rateLimits: true } });
  });
  afterAll(async () => {
    await t.close();
  });

  it('is its /64: other addresses of the same network share the limit, another network does not', async () => {
    for (let i = 0; i < EVALUATE_LIMIT; i++) {
      expect((await evaluate(t, { remoteAddress: `2001:db8:aa:1::${(i + 1).toString(16)}` })).statusCode).toBe(200);
    }
    expectRateLimited(await evaluate(t, { remoteAddress: '2001:db8:aa:1:ffff:ffff:ffff:fffe' }));
    expect((await evaluate(t, { remoteAddress: '2001:db8:aa:2::1' })).statusCode).toBe(200);
  });

  it.each([
    ['1.2.3.4', '1.2.3.4'],
    ['::ffff:1.2.3.4', '1.2.3.4'],
    ['2001:DB8:0:0:1::9', '2001:db8:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['not an address', 'not an address'],
    // X-Forwarded-For as some proxies write it, with the client's port
    ['203.0.113.7:50123', '203.0.113.7'],
    ['[2001:db8:aa:1::9]:50123', '2001:db8:aa:1::/64'],
    ['[2001:db8:aa:1::9]', '2001:db8:aa:1::/64'],
    ['[::ffff:1.2.3.4]:8', '1.2.3.4'],
  ])('sourceOf(%s) is %s', (ip, source) => {
    expect(sourceOf(ip)).toBe(source);
  });
});

describe('per-source rate limits behind a trusted proxy', () => {
  const proxy = '10.0.0.7';
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp({ config: { rateLimits: true, trustProxy: [proxy] } });
  });
  afterAll(async () => {
    await t.close();
  });

  it('X-Forwarded-For names the source when TRUST_PROXY names the proxy', async () => {
    const client = { remoteAddress: proxy, forwardedFor: '203.0.113.10' };
    expect((await evaluateTimes(t, client, EVALUATE_LIMIT)).every((c) => c === 200)).toBe(true);
    expectRateLimited(await evaluate(t, client));
    // Another client behind the same proxy has its own count.
    expect((await evaluate(t, { remoteAddress: proxy, forwardedFor: '203.0.113.11' })).statusCode).toBe(200);
    // The client's address reached directly is the same source.
    expectRateLimited(await evaluate(t, { remoteAddress: '203.0.113.10' }));
  });

  it('the nearest untrusted address in the chain is the source', async () => {
    // A client cannot escape its limit by prepending made-up hops.
    const client = { remoteAddress: proxy, forwardedFor: '203.0.113.20' };
    await evaluateTimes(t, client, EVALUATE_LIMIT);
    expectRateLimited(await evaluate(t, { remoteAddress: proxy, forwardedFor: '192.0.2.99, 203.0.113.20' }));
  });

  it('X-Forwarded-For from an address that is not the trusted proxy is ignored', async () => {
    const untrusted = '10.0.0.8';
    for (let i = 0; i < EVALUATE_LIMIT; i++) {
      expect((await evaluate(t, { remoteAddress: untrusted, forwardedFor: `198.18.0.${i % 250}` })).statusCode).toBe(200);
    }
    expectRateLimited(await evaluate(t, { remoteAddress: untrusted, forwardedFor: '198.18.1.1' }));
  });
});

describe('rate limits switched off', () => {
  it('RATE_LIMITS=off lets every request through', async () => {
    const t = await createTestApp({ config: { rateLimits: false } });
    try {
      const codes = await evaluateTimes(t, { remoteAddress: '198.51.100.50' }, EVALUATE_LIMIT + 5);
      expect(codes.every((c) => c === 200)).toBe(true);
    } finally {
      await t.close();
    }
  });

  it('also for the limits the service counts itself (refused payments, evidence, policy creations)', async () => {
    const limiter = createRateLimiter(testConfig({ rateLimits: false, refusedPaymentLimit: 1, evidenceLimit: 1, policyCreateLimit: 1 }));
    // Three times over limits of one: each would be a 429 (a rejected promise) with limits on.
    for (let i = 0; i < 3; i++) {
      await expect(limiter.reserve('refusedPayments', '198.51.100.51')).resolves.toBeTypeOf('function');
      await expect(limiter.consume('evidence', 'policy:sgp_x')).resolves.toBeUndefined();
      await expect(limiter.consume('policyCreate', '198.51.100.51')).resolves.toBeUndefined();
    }
  });
});

/**
 * Two instances of the service for a describe block: one database, one Redis (each its own client,
 * a fresh key prefix), separate processes' worth of state. `redis` is instance a's client.
 */
function twoInstancesOnRedis(config: Partial<Config>) {
  const keyPrefix = `pw-test:${randomBytes(8).toString('hex')}`;
  const pair = { keyPrefix } as { a: TestApp; b: TestApp; redis: Redis; keyPrefix: string };
  let redisB: Redis | undefined;
  let database: TestDatabase | undefined;
  beforeAll(async () => {
    pair.redis = new Redis(process.env.REDIS_URL!, { lazyConnect: true, maxRetriesPerRequest: 1 });
    redisB = new Redis(process.env.REDIS_URL!, { lazyConnect: true, maxRetriesPerRequest: 1 });
    await Promise.all([pair.redis.connect(), redisB.connect()]);
    database = await createTestDatabase();
    pair.a = await createTestApp({ config: { rateLimits: true, ...config }, database, redis: { client: pair.redis, keyPrefix } });
    pair.b = await createTestApp({ config: { rateLimits: true, ...config }, database, redis: { client: redisB, keyPrefix } });
  });
  afterAll(async () => {
    await pair.a?.close();
    await pair.b?.close();
    await database?.drop();
    if (pair.redis) {
      const keys = await pair.redis.keys(`${keyPrefix}*`);
      if (keys.length) await pair.redis.del(...keys);
    }
    pair.redis?.disconnect();
    redisB?.disconnect();
  });
  return pair;
}

describe.skipIf(!process.env.REDIS_URL)('rate limits shared through Redis', () => {
  const pair = twoInstancesOnRedis({ leadLimit: 4 });

  it('two instances share one evaluation limit per source', async () => {
    const me = { remoteAddress: '198.51.100.60' };
    expect((await evaluateTimes(pair.a, me, EVALUATE_LIMIT / 2)).every((c) => c === 200)).toBe(true);
    expect((await evaluateTimes(pair.b, me, EVALUATE_LIMIT / 2)).every((c) => c === 200)).toBe(true);
    expectRateLimited(await evaluate(pair.a, me));
    expectRateLimited(await evaluate(pair.b, me));
    // the counter lives in Redis under the configured prefix
    expect((await pair.redis.keys(`${pair.keyPrefix}*`)).length).toBeGreaterThan(0);
  });

  it('other sources keep their own count across instances', async () => {
    expect((await evaluate(pair.a, { remoteAddress: '198.51.100.61' })).statusCode).toBe(200);
    expect((await evaluate(pair.b, { remoteAddress: '198.51.100.61' })).statusCode).toBe(200);
  });

  it('two instances share one pilot-lead limit', async () => {
    const from = '198.51.100.62';
    const send = (t: TestApp) => t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: leadBody, remoteAddress: from });
    expect((await send(pair.a)).statusCode).toBe(201);
    expect((await send(pair.b)).statusCode).toBe(201);
    expect((await send(pair.a)).statusCode).toBe(201);
    expect((await send(pair.b)).statusCode).toBe(201);
    expectRateLimited(await send(pair.a));
    expectRateLimited(await send(pair.b));
    expect(json(await send(pair.b)).code).toBe('rate_limited');
  });
});

/**
 * Requests that arrive at once, split over two instances: the count in Redis is shared and
 * atomic, so exactly the limit passes, not the limit at each instance.
 */
describe.skipIf(!process.env.REDIS_URL)('a burst split over two instances sharing Redis', () => {
  const pair = twoInstancesOnRedis({ policyCreateLimit: 4, evidenceLimit: 6 });

  const statuses = (responses: Array<{ statusCode: number }>) => responses.map((r) => r.statusCode).sort();

  it('ten policy creations from one source at once: exactly the daily limit is created', async () => {
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? pair.a : pair.b).app.inject({ method: 'POST', url: POLICIES, payload: createBody(), remoteAddress: '198.51.100.80' })),
    );
    expect(statuses(responses)).toEqual([...Array(4).fill(201), ...Array(6).fill(429)]);
    for (const r of responses.filter((x) => x.statusCode === 429)) expect(Number(r.headers['retry-after'])).toBeGreaterThan(0);
  });

  it("fourteen evidence requests of one policy at once: exactly the policy's limit passes", async () => {
    const p = json(await pair.a.app.inject({ method: 'POST', url: POLICIES, payload: createBody(), remoteAddress: '198.51.100.81' }));
    const responses = await Promise.all(
      Array.from({ length: 14 }, (_, i) => createChainRaw(i % 2 ? pair.a : pair.b, p.agentKey, intentBody(p.policyId, { amount: '1' }))),
    );
    expect(statuses(responses)).toEqual([...Array(6).fill(201), ...Array(8).fill(429)]);
  });
});

/** A relay to the test Redis (see tcpRelay: `stall()` is a Redis that is stopped or swapping). */
async function stallingRelay(target: string) {
  const { hostname, port } = new URL(target);
  const relay = await tcpRelay(hostname, Number(port || 6379));
  return { ...relay, url: `redis://127.0.0.1:${relay.port}` };
}

describe.skipIf(!process.env.REDIS_URL)('a Redis that stops answering', () => {
  let relay: Awaited<ReturnType<typeof stallingRelay>>;
  let redis: Redis;
  let t: TestApp;
  beforeAll(async () => {
    relay = await stallingRelay(process.env.REDIS_URL!);
    redis = connectRedis(relay.url, { lazyConnect: true });
    await redis.connect();
    t = await createTestApp({ config: { rateLimits: true }, redis: { client: redis, keyPrefix: `pw-test:${randomBytes(8).toString('hex')}` } });
  });
  afterAll(async () => {
    relay?.resume();
    await t?.close();
    redis?.disconnect();
    await relay?.close();
  });

  it('holds no request: the in-process limiter answers after REDIS_COMMAND_TIMEOUT_MS, and keeps counting', async () => {
    const me = { remoteAddress: '198.51.100.70' };
    expect((await evaluate(t, me)).statusCode).toBe(200);
    relay.stall();
    const concurrently = async (n: number) => (await Promise.all(Array.from({ length: n }, () => evaluate(t, me)))).map((r) => r.statusCode);
    const started = Date.now();
    expect(await concurrently(5)).toEqual([200, 200, 200, 200, 200]);
    expect(Date.now() - started).toBeLessThan(REDIS_COMMAND_TIMEOUT_MS + 2000);
    // Limits stay in force meanwhile: the insurance limiter counts this source on its own.
    expect((await concurrently(EVALUATE_LIMIT - 5)).every((c) => c === 200)).toBe(true);
    expectRateLimited(await evaluate(t, me));
    relay.resume();
    expect((await evaluate(t, { remoteAddress: '198.51.100.71' })).statusCode).toBe(200);
  }, 30_000);
});

describe('a reserved count given back after its window ended', () => {
  afterAll(() => vi.useRealTimers());

  it('is not taken off the next window: the next hour allows exactly the limit', async () => {
    vi.useFakeTimers({ now: new Date('2026-01-15T12:00:00Z') });
    const limiter = createRateLimiter(testConfig({ rateLimits: true, refusedPaymentLimit: 3 }), { keyPrefix: `rl-${randomBytes(4).toString('hex')}` });
    const source = '198.51.100.7';
    // Three verifies in flight when the hour ends; each gives its count back afterwards (the
    // facilitator accepted, or could not be reached).
    const giveBack = await Promise.all([1, 2, 3].map(() => limiter.reserve('refusedPayments', source)));
    await expect(limiter.reserve('refusedPayments', source)).rejects.toMatchObject({ code: 'rate_limited' });
    await vi.advanceTimersByTimeAsync(3600_000 + 1000);
    for (const g of giveBack) await g();
    let allowed = 0;
    for (let i = 0; i < 10; i++) {
      try {
        await limiter.reserve('refusedPayments', source);
        allowed++;
      } catch {
        break;
      }
    }
    expect(allowed).toBe(3);
  });

  it('within its window, a count given back is free again', async () => {
    vi.useFakeTimers({ now: new Date('2026-01-15T12:00:00Z') });
    const limiter = createRateLimiter(testConfig({ rateLimits: true, refusedPaymentLimit: 1 }), { keyPrefix: `rl-${randomBytes(4).toString('hex')}` });
    const giveBack = await limiter.reserve('refusedPayments', '198.51.100.8');
    await vi.advanceTimersByTimeAsync(60_000);
    await giveBack();
    await expect(limiter.reserve('refusedPayments', '198.51.100.8')).resolves.toBeTypeOf('function');
  });
});

describe.skipIf(!process.env.REDIS_URL)('a Redis that is connected but refuses every command (an ACL user without scripting)', () => {
  const user = `pw-test-noscript-${randomBytes(4).toString('hex')}`;
  let admin: Redis;
  let refusing: Redis;
  beforeAll(async () => {
    admin = connectRedis(process.env.REDIS_URL!, { lazyConnect: true });
    await admin.connect();
    // rate-limiter-flexible counts with a Lua script: NOPERM for every count (OOM at maxmemory is alike).
    await admin.call('ACL', 'SETUSER', user, 'on', 'nopass', '~*', '+@all', '-@scripting');
    const url = new URL(process.env.REDIS_URL!);
    url.username = user;
    refusing = connectRedis(url.toString(), { lazyConnect: true });
    await refusing.connect();
  });
  afterAll(async () => {
    refusing?.disconnect();
    await admin?.call('ACL', 'DELUSER', user);
    admin?.disconnect();
  });

  it('keeps limits in force in process and says so in the log, once a minute at most', async () => {
    const limiter = createRateLimiter(testConfig({ rateLimits: true, leadLimit: 2 }), { redis: refusing, keyPrefix: `pw-test:${randomBytes(8).toString('hex')}` });
    const warnings: string[] = [];
    warnWhileRedisFails({ redis: refusing, limiter }, { warn: (_obj, msg) => void warnings.push(msg) });
    await limiter.consume('pilotLeads', '198.51.100.80');
    await limiter.consume('pilotLeads', '198.51.100.80');
    await expect(limiter.consume('pilotLeads', '198.51.100.80')).rejects.toMatchObject({ code: 'rate_limited' });
    expect(warnings).toEqual(['Redis unavailable: rate limits are counted per instance until it is back']);
  });
});

describe.skipIf(!process.env.REDIS_URL)('REDIS_URL naming a database the Redis does not have', () => {
  /** The test Redis's URL naming database `db`. */
  const withDatabase = (db: number) => Object.assign(new URL(process.env.REDIS_URL!), { pathname: `/${db}` }).toString();

  it('stops the start, naming REDIS_URL, instead of counting on database 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-redis-db-'));
    try {
      const env = { DATABASE_URL: `sqlite:${join(dir, 'pw.sqlite')}`, REDIS_URL: withDatabase(4096) };
      await expect(openInfrastructure(parseConfig(env))).rejects.toThrow(/^REDIS_URL: this Redis has no database 4096 \(ERR DB index is out of range\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a client whose database is refused later counts in process, never on database 0', async () => {
    const client = connectRedis(withDatabase(4096));
    // Listened for at once: the refusal may come while the admin client below connects.
    const closed = new Promise((ended) => client.once('end', ended));
    const prefix = `pw-test-refused-db-${randomBytes(4).toString('hex')}`;
    const limiter = createRateLimiter(parseConfig({ LEAD_LIMIT: '1' }), { redis: client, keyPrefix: prefix });
    const admin = connectRedis(withDatabase(0), { lazyConnect: true });
    try {
      await admin.connect();
      await closed;
      await limiter.consume('pilotLeads', '198.51.100.81');
      await expect(limiter.consume('pilotLeads', '198.51.100.81')).rejects.toMatchObject({ code: 'rate_limited' });
      expect(await admin.keys(`${prefix}:*`)).toEqual([]);
    } finally {
      client.disconnect();
      admin.disconnect();
    }
  });
});

describe.skipIf(!process.env.REDIS_URL)('REDIS_KEY_PREFIX: two deployments on one Redis', () => {
  const prefixes = [`pw-test-staging-${randomBytes(4).toString('hex')}`, `pw-test-production-${randomBytes(4).toString('hex')}`];
  let redis: Redis;
  const dirs: string[] = [];
  beforeAll(async () => {
    redis = connectRedis(process.env.REDIS_URL!, { lazyConnect: true });
    await redis.connect();
  });
  afterAll(async () => {
    for (const p of prefixes) {
      const keys = await redis.keys(`${p}:*`);
      if (keys.length) await redis.del(...keys);
    }
    redis?.disconnect();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('count apart: staging using up its policy creations leaves production its own', async () => {
    const deployment = async (prefix: string) => {
      const dir = mkdtempSync(join(tmpdir(), 'paywarden-prefix-'));
      dirs.push(dir);
      const env = { DATABASE_URL: `sqlite:${join(dir, 'pw.sqlite')}`, REDIS_URL: process.env.REDIS_URL!, REDIS_KEY_PREFIX: prefix, POLICY_CREATE_LIMIT: '2' };
      const infra = await openInfrastructure(parseConfig(env));
      // Until its client has connected, a count is taken in process.
      if (infra.redis!.status !== 'ready') await new Promise((ready) => infra.redis!.once('ready', ready));
      return infra;
    };
    const [staging, production] = [await deployment(prefixes[0]!), await deployment(prefixes[1]!)];
    try {
      await staging.limiter.consume('policyCreate', '198.51.100.90');
      await staging.limiter.consume('policyCreate', '198.51.100.90');
      await expect(staging.limiter.consume('policyCreate', '198.51.100.90')).rejects.toMatchObject({ code: 'rate_limited' });
      await expect(production.limiter.consume('policyCreate', '198.51.100.90')).resolves.toBeUndefined();
      expect(await redis.keys(`${prefixes[0]}:policyCreate:*`)).toHaveLength(1);
      expect(await redis.keys(`${prefixes[1]}:policyCreate:*`)).toHaveLength(1);
    } finally {
      await staging.close();
      await production.close();
    }
  });

  it('is refused at start when it is not a plain key prefix', () => {
    expect(() => parseConfig({ REDIS_KEY_PREFIX: 'two words' })).toThrow(/REDIS_KEY_PREFIX/);
    expect(parseConfig({}).redisKeyPrefix).toBe('paywarden:rl');
  });
});
