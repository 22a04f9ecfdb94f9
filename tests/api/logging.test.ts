import { once } from 'node:events';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import pg from 'pg';
import { HttpRequestError } from 'viem';
import type { InjectOptions } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loggerOptions } from '../../src/app.js';
import { redactKeys } from '../../src/platform/errors.js';
import { testConfig, type Config } from '../../src/config.js';
import { createChainClient, upstream } from '../../src/platform/chain.js';
import { connectRedis, warnWhileRedisFails } from '../../src/platform/deps.js';
import { createRateLimiter } from '../../src/platform/rate-limit.js';
import { ADDR, createTestApp, createTestAppWith, json, type TestApp } from '../helpers/app.js';
import { bearer, createPolicy, decide, DECISIONS, POLICIES, type Created } from '../helpers/policies.js';

describe('log lines never hold a key', () => {
  let t: TestApp;
  let p: Created;
  const lines: string[] = [];

  beforeAll(async () => {
    const stream = new PassThrough();
    stream.on('data', (chunk: Buffer) => lines.push(...chunk.toString('utf8').split('\n').filter(Boolean)));
    // The most a log can hold: every level, the service's own logger options.
    t = await createTestApp({ logger: loggerOptions(testConfig({ logLevel: 'trace' }), stream) });
    p = await createPolicy(t);
  });
  afterAll(() => t.close());

  it('not when a caller sends one where it does not belong, in a query string or a path', async () => {
    const order = json<{ id: string; key: string }>(await t.app.inject({ method: 'POST', url: '/api/orders', payload: { path: '/api/quick-check', input: {} } }));
    expect(order.key).toMatch(/^ork_/);
    const attempts: InjectOptions[] = [
      // the usual places: headers and bodies
      { method: 'GET', url: `${POLICIES}/${p.policyId}`, headers: bearer(p.adminKey) },
      { method: 'GET', url: `${POLICIES}/${p.policyId}`, headers: bearer(p.agentKey) },
      { method: 'POST', url: '/api/orders/recover', payload: { id: order.id, key: order.key } },
      { method: 'GET', url: '/api/quick-check', headers: { 'report-id': order.id, 'recovery-key': order.key } },
      // the mistakes: a key in a query string, or pasted where an identifier goes
      { method: 'GET', url: `${POLICIES}/${p.policyId}?key=${p.adminKey}` },
      { method: 'GET', url: `${POLICIES}/${p.policyId}/decisions?status=PENDING&agentKey=${p.agentKey}`, headers: bearer(p.adminKey) },
      { method: 'GET', url: `${POLICIES}/${p.adminKey}` },
      { method: 'POST', url: `/api/orders/recover?key=${order.key}`, payload: { id: order.id, key: order.key } },
      { method: 'GET', url: `/api/nowhere/${order.key.slice('ork_'.length)}` },
      // ... and where an error message would quote it: a query parameter's name, a body member's
      // name, an unknown route's path with a malformed body
      { method: 'GET', url: `${POLICIES}/${p.policyId}/decisions?${p.agentKey}`, headers: bearer(p.adminKey) },
      { method: 'POST', url: '/api/pilot-leads', payload: { email: 'a@example.com', company: 'c', monthlyDecisions: 'not-sure', needs: '0123456789', [p.agentKey]: 1 } },
      { method: 'POST', url: `/api/spendpolicy/policy/${p.adminKey}`, headers: { 'content-type': 'application/json' }, payload: '{bad' },
    ];
    for (const a of attempts) {
      // Whatever the answer (the paid route cannot reach its facilitator here: 503), never a 500.
      const res = await t.app.inject(a);
      expect(res.statusCode, String(a.url)).not.toBe(500);
      // Nor does the answer echo a key the caller put where it does not belong (a member's or a
      // query parameter's name, which a validation error names); keys are shown once.
      if (res.statusCode >= 400) {
        for (const secret of [p.adminKey, p.agentKey, order.key]) expect(res.body, String(a.url)).not.toContain(secret.slice(-43));
      }
    }
    await decide(t, p, { amount: '1', recipient: ADDR.alice });

    // The paid route's 503 (no PAY_TO here) is answered on purpose: a warning with its code, no
    // stack; nothing above was unexpected, so nothing is logged as an error.
    const parsed = lines.map((l) => JSON.parse(l) as { level: number; code?: string; err?: unknown });
    expect(parsed.filter((l) => l.level >= 50)).toEqual([]);
    expect(parsed.find((l) => l.code === 'payments_unavailable')).toMatchObject({ level: 40 });
    expect(parsed.find((l) => l.code === 'payments_unavailable')).not.toHaveProperty('err');
    const log = lines.join('\n');
    for (const secret of [p.adminKey, p.agentKey, order.key]) {
      expect(log).not.toContain(secret);
      expect(log).not.toContain(secret.slice(-43)); // its secret part, without the prefix
    }
    // The requests were logged, with what identifies them intact.
    const urls = lines.map((l) => (JSON.parse(l) as { req?: { url?: string } }).req?.url).filter(Boolean);
    expect(urls).toContain(`${POLICIES}/${p.policyId}?key=[redacted]`);
    expect(urls).toContain(`${POLICIES}/[redacted]`);
    expect(urls).toContain(`${POLICIES}/${p.policyId}/decisions?status=PENDING&agentKey=[redacted]`);
    expect(urls).toContain(DECISIONS);
  });

  it('addresses and transaction hashes in a URL stay readable', () => {
    const hash = `0x${'ab'.repeat(32)}`;
    expect(redactKeys(`/api/token-coverage?token=${ADDR.mixedCase}&tx=${hash}`)).toBe(`/api/token-coverage?token=${ADDR.mixedCase}&tx=${hash}`);
    expect(redactKeys(`/x?cursor=123&id=sgp_${'0'.repeat(32)}`)).toBe(`/x?cursor=123&id=sgp_${'0'.repeat(32)}`);
    expect(redactKeys(`/x/${'A'.repeat(42)}`)).toBe(`/x/${'A'.repeat(42)}`);
    const digest = `sha256:${'0f'.repeat(32)}`;
    expect(redactKeys(`a different preflight (${digest}) is attached`)).toBe(`a different preflight (${digest}) is attached`);
    expect(redactKeys(`/x/${'A'.repeat(43)}/y`)).toBe('/x/[redacted]/y');
    // x402 reason codes tell a payer what to fix; a key with underscores in it is still a key.
    const code = 'invalid_exact_evm_payload_authorization_value_mismatch';
    expect(redactKeys(`the payment was not accepted (${code})`)).toBe(`the payment was not accepted (${code})`);
    expect(redactKeys(`sgp_agent_${'aB3_xY9kLm'.repeat(4)}qrs`)).toBe('[redacted]');
    expect(redactKeys(`sgp_admin_${'a'.repeat(43)}`)).toBe('[redacted]');
  });
});

describe('what the log does with unusual errors and keys in unusual places', () => {
  const KEY = `sgp_admin_${'A1b2C3d4E5'.repeat(4)}xyz`;
  /** The service's logger options at `level`, and the lines they write. */
  function capturedLog(level: string, config: Partial<Config> = {}) {
    const lines: string[] = [];
    const stream = new PassThrough();
    stream.on('data', (c: Buffer) => lines.push(...c.toString('utf8').split('\n').filter(Boolean)));
    return { lines, stream, logger: loggerOptions(testConfig({ ...config, logLevel: level }), stream) };
  }
  /** A pino logger with the service's options, and the lines it writes. */
  function serviceLogger(config: Partial<Config> = {}) {
    const { lines, stream, logger } = capturedLog('trace', config);
    const { stream: _unused, ...opts } = logger;
    return { lines, log: pino(opts, stream) };
  }
  const flushed = () => new Promise((r) => setImmediate(r));

  it('an err that is not an Error is logged as it is, not a crash of the logger', async () => {
    const { lines, log } = serviceLogger();
    expect(() => log.error({ err: `plain ${KEY}` }, 'x')).not.toThrow();
    expect(() => log.error({ err: { code: 'EWHATEVER' } }, 'y')).not.toThrow();
    await flushed();
    expect(lines.join('\n')).toContain('EWHATEVER');
    expect(lines.join('\n')).not.toContain(KEY);
  });

  it('an error logged without a message: pino takes its message, and it is redacted too', async () => {
    const { lines, log } = serviceLogger();
    // The shape Fastify itself logs (a reply sent twice names the raw URL).
    log.warn({ err: new Error(`Reply was already sent for url: /api/x?key=${KEY}`) });
    log.error(new Error(`bad ${KEY}`));
    await flushed();
    expect(lines).toHaveLength(2);
    expect(lines.join('\n')).not.toContain(KEY);
    expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(['Reply was already sent for url: /api/x?key=[redacted]', 'bad [redacted]']);
  });

  it('a key percent-encoded in the URL, or sent as the Host, is redacted', async () => {
    const { lines, logger } = capturedLog('trace');
    const t = await createTestApp({ logger });
    try {
      const encoded = [...KEY].map((c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).join('');
      await t.app.inject({ method: 'GET', url: `/healthz?key=${encoded}` });
      await t.app.inject({ method: 'GET', url: '/healthz', headers: { host: KEY } });
      const log = lines.join('\n');
      expect(log).not.toContain(encoded);
      expect(log).not.toContain(KEY);
      expect(log).toContain('/healthz?key=[redacted]');
    } finally {
      await t.close();
    }
  });

  it('a route that throws a plain object still answers a problem body, and the log keeps it', async () => {
    const { lines, logger } = capturedLog('info');
    const t = await createTestAppWith((app) => void app.get('/boom', async () => Promise.reject({ code: 'ESOMETHING' })), { logger });
    try {
      const res = await t.app.inject({ method: 'GET', url: '/boom' });
      expect(res.statusCode).toBe(500);
      expect(res.headers['content-type']).toContain('application/problem+json');
      const failure = lines.map((l) => JSON.parse(l) as { level: number; err?: unknown }).find((l) => l.level === 50);
      expect(JSON.stringify(failure?.err)).toContain('ESOMETHING');
    } finally {
      await t.close();
    }
  });

  it('outages are errors with their cause: a facilitator down, a database closed', async () => {
    const { lines, logger } = capturedLog('info');
    const t = await createTestApp({ config: { payTo: ADDR.carol }, logger });
    try {
      // The facilitator's URL here points at a closed port.
      expect((await t.app.inject({ method: 'GET', url: '/api/quick-check' })).statusCode).toBe(502);
      await t.database.close();
      expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
      expect((await t.app.inject({ method: 'POST', url: '/api/orders', payload: { path: '/api/quick-check', input: {} } })).statusCode).toBe(503);
      const errors = lines.map((l) => JSON.parse(l) as { level: number; msg?: string; err?: { stack?: string } }).filter((l) => l.level === 50);
      expect(errors).toHaveLength(3);
      for (const e of errors) expect(e).toMatchObject({ msg: 'request failed', err: { stack: expect.any(String) } });
    } finally {
      await t.close(); // the database is closed already; this removes its files
    }
  });
  it('a Redis that refuses the password of REDIS_URL: the warning names the command, never its password', async () => {
    // A server that refuses every command as Redis refuses a wrong password: ioredis attaches the
    // refused command, AUTH with the password as its argument, to the error it reports.
    const server = createServer((socket) => socket.on('data', () => socket.write('-WRONGPASS invalid username-password pair or user is disabled.\r\n')));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const password = 'not-the-right-one-3f9c2a71';
    const redis = connectRedis(`redis://:${password}@127.0.0.1:${(server.address() as AddressInfo).port}/0`);
    const { lines, log } = serviceLogger();
    try {
      const warned = new Promise<void>((resolve) => warnWhileRedisFails({ redis, limiter: createRateLimiter(testConfig()) }, { warn: (obj, msg) => (log.warn(obj, msg), resolve()) }));
      await warned;
      await flushed();
      const line = JSON.parse(lines[0]!) as { msg: string; err: { message: string; command?: { name?: string; args?: unknown } } };
      expect(line.msg).toMatch(/^Redis unavailable/);
      expect(line.err.message).toMatch(/WRONGPASS/);
      expect(line.err.command).toEqual({ name: 'auth', args: '[redacted]' });
      expect(lines.join('\n')).not.toContain(password);
    } finally {
      redis.disconnect();
      server.close();
    }
  });

  it("a row PostgreSQL refused is not written out: its detail would hold every value (key hashes, a payment's signature)", async () => {
    const { lines, log } = serviceLogger();
    const hash = 'c0ffee'.repeat(10) + 'beef';
    // The error node-postgres reports for a not-null or check violation, as it builds it.
    const err = Object.assign(new pg.DatabaseError('null value in column "name" of relation "policies" violates not-null constraint', 200, 'error'), {
      code: '23502',
      detail: `Failing row contains (sgp_0123, null, agent-1, {}, 1, active, active, 0, ${hash}, ${hash}).`,
      table: 'policies',
      column: 'name',
    });
    log.error({ err }, 'request failed');
    // ... also when it is nested in another error's members.
    log.error({ err: Object.assign(new Error('outer'), { inner: err }) }, 'request failed');
    await flushed();
    const log0 = lines.join('\n');
    expect(log0).not.toContain(hash);
    const first = JSON.parse(lines[0]!) as { err: Record<string, unknown> };
    expect(first.err).toMatchObject({ code: '23502', table: 'policies', column: 'name', detail: 'Failing row contains [redacted]' });
    expect(first.err.message).toMatch(/violates not-null constraint/);
  });
  it("an RPC provider's API key in the URL a viem error names is not written out, in whatever member", async () => {
    const { lines, log } = serviceLogger();
    // An Alchemy key: 32 characters, too short to be redacted as one of ours.
    const apiKey = 'AbCdEf0123456789AbCdEf0123456789';
    const err = new HttpRequestError({ url: `https://base-mainnet.g.alchemy.com/v2/${apiKey}`, body: { method: 'eth_chainId' }, status: 401, details: 'Must be authenticated!' });
    log.error({ err }, 'request failed');
    log.error(err); // the message becomes the line's
    log.error({ err: new Error('no answer', { cause: err }) }, 'request failed'); // its message and stack in the cause's
    // A password in a Redis or PostgreSQL URL quoted by an error goes the same way; file: URLs (stack frames) stay.
    log.error({ err: new Error('could not reach redis://:pw-in-url-4c1d@10.0.0.7:6379/0 from file:///srv/app/x.js') }, 'request failed');
    await flushed();
    const all = lines.join('\n');
    expect(all).not.toContain(apiKey);
    expect(all).not.toContain('pw-in-url-4c1d');
    const first = JSON.parse(lines[0]!) as { err: { message: string; url: string; metaMessages: string[]; status: number } };
    expect(first.err).toMatchObject({ url: 'https://base-mainnet.g.alchemy.com/…', status: 401 });
    expect(first.err.message).toContain('URL: https://base-mainnet.g.alchemy.com/…');
    expect(first.err.message).toContain('Must be authenticated!');
    expect((JSON.parse(lines[1]!) as { msg: string }).msg).toContain('https://base-mainnet.g.alchemy.com/…');
    expect((JSON.parse(lines[3]!) as { err: { message: string } }).err.message).toBe('could not reach redis://10.0.0.7:6379/… from file:///srv/app/x.js');
  });
  it("an RPC node that quotes the API key of its URL (a gateway's 404, a refusal naming the key): the 502's logged cause leaves it out", async () => {
    const apiKey = 'k3yOfTheRpcProvider0123456789abc';
    // The first request answers as an Express gateway answers a path it does not serve, the next
    // ones with a JSON-RPC error naming the key it refused.
    let requests = 0;
    const node = createHttpServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (requests++ === 0) res.writeHead(404, { 'content-type': 'text/html' }).end(`<pre>Cannot POST ${req.url}</pre>`);
        else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: 1, error: { code: -32001, message: `key ${apiKey} is over its quota` } }));
      });
    });
    node.listen(0, '127.0.0.1');
    await once(node, 'listening');
    const rpcUrls = [`http://127.0.0.1:${(node.address() as AddressInfo).port}/v2/${apiKey}`];
    const { lines, log } = serviceLogger({ rpcUrls });
    try {
      const chain = createChainClient({ rpcUrls, rpcTimeoutMs: 2000 }, { anyChain: true });
      for (let i = 0; i < 2; i++) {
        const err = await upstream(() => chain.getBlockNumber({ cacheTime: 0 })).catch((e: unknown) => e);
        expect(err).toMatchObject({ code: 'upstream_unavailable' });
        log.error({ err }, 'request failed');
      }
      await flushed();
      expect(lines).toHaveLength(2);
      expect(lines.join('\n')).not.toContain(apiKey);
      // What the node said is still there, for whoever reads the log.
      expect(lines[0]).toContain('Cannot POST /v2/<rpc-key>');
      expect(lines[1]).toContain('key <rpc-key> is over its quota');
    } finally {
      node.close();
    }
  });
});
