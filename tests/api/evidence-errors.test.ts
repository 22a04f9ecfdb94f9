import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { purgeExpired } from '../../src/features/maintenance.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import { UNKNOWN_POLICY_ID, bearer, createPolicy, putPolicy, rules, type Created } from '../helpers/policies.js';
import {
  CHAINS,
  UNKNOWN_CHAIN_ID,
  attachPreflight,
  createChain,
  createChainRaw,
  intentBody,
  randomTxHash,
  readChain,
  readSummary,
  settle,
} from './evidence-helpers.js';

type Res = { statusCode: number; headers: Record<string, unknown>; body: string };
const preflightBody = { chain: 'base', to: ADDR.bob };

/** Every evidence endpoint on chain `id` with `key` (creation with a fresh intent of `policyId`). */
function everyEndpoint(t: TestApp, policyId: string, id: string, key: string | undefined): Array<[string, () => Promise<Res>]> {
  return [
    ['create', () => createChainRaw(t, key, intentBody(policyId, { amount: '1' }))],
    ['read', () => readChain(t, id, key)],
    ['summary', () => readSummary(t, id, key)],
    ['preflight', () => attachPreflight(t, id, key, preflightBody)],
    ['settlement', () => settle(t, id, key, { txHash: randomTxHash() })],
  ];
}

describe('evidence-chain error table', () => {
  let t: TestApp;
  let p: Created;
  let other: Created;
  let chainId: string;
  beforeAll(async () => {
    t = await createTestApp();
    p = await createPolicy(t);
    other = await createPolicy(t);
    chainId = (await createChain(t, p)).evidenceChainId;
  });
  afterAll(async () => {
    await t.close();
  });

  describe('400 invalid input', () => {
    it.each([
      ['a missing field', (b: Record<string, unknown>) => delete b.requestId, 'body/requestId'],
      ['an unknown field', (b: Record<string, unknown>) => (b.note = 'x'), 'body/note'],
      ['a policyId in upper case', (b: Record<string, unknown>) => (b.policyId = String(b.policyId).toUpperCase().replace('SGP_', 'sgp_')), 'body/policyId'],
      ['an empty agentId', (b: Record<string, unknown>) => (b.agentId = ''), 'body/agentId'],
      ['an agentId of 81 characters', (b: Record<string, unknown>) => (b.agentId = 'a'.repeat(81)), 'body/agentId'],
      ['a requestId of 121 characters', (b: Record<string, unknown>) => (b.requestId = 'r'.repeat(121)), 'body/requestId'],
      ['chain ethereum', (b: Record<string, unknown>) => (b.chain = 'ethereum'), 'body/chain'],
      ['asset USDT', (b: Record<string, unknown>) => (b.asset = 'USDT'), 'body/asset'],
      ['a short recipient', (b: Record<string, unknown>) => (b.recipient = '0x1234'), 'body/recipient'],
      ['an amount with a leading zero', (b: Record<string, unknown>) => (b.amount = '01.5'), 'body/amount'],
      ['an amount with 7 fraction digits', (b: Record<string, unknown>) => (b.amount = '1.0000001'), 'body/amount'],
      ['a numeric amount', (b: Record<string, unknown>) => (b.amount = 5), 'body/amount'],
      ['a negative amount', (b: Record<string, unknown>) => (b.amount = '-1'), 'body/amount'],
      ['a bad expectedFrom', (b: Record<string, unknown>) => (b.expectedFrom = 'alice'), 'body/expectedFrom'],
    ])('create with %s', async (_name, mutate, path) => {
      const body = intentBody(p.policyId);
      mutate(body);
      expectInvalid(await createChainRaw(t, p.agentKey, body), path);
    });

    it('accepts the amount 0 and 12 integer digits with 6 fraction digits', async () => {
      expect((await createChainRaw(t, p.agentKey, intentBody(p.policyId, { amount: '0' }))).statusCode).toBe(201);
      const big = await createChainRaw(t, p.agentKey, intentBody(p.policyId, { amount: '999999999999.999999' }));
      expect(json(big)).toMatchObject({ decision: 'BLOCK' });
    });

    it('a malformed chain id, settlement body or preflight body', async () => {
      expectInvalid(await readChain(t, 'ec_123', p.agentKey), 'params/evidenceChainId');
      expectInvalid(await readSummary(t, chainId.toUpperCase(), p.agentKey));
      expectInvalid(await settle(t, chainId, p.agentKey, { txHash: '0x1234' }), 'body/txHash');
      expectInvalid(await settle(t, chainId, p.agentKey, { txHash: randomTxHash(), extra: 1 }), 'body/extra');
      expectInvalid(await attachPreflight(t, chainId, p.agentKey, { chain: 'base' }), 'body/to');
      expectInvalid(await attachPreflight(t, chainId, p.agentKey, { ...preflightBody, data: '0xabc' }), 'body/data');
      expectInvalid(await attachPreflight(t, chainId, p.agentKey, { ...preflightBody, valueWei: '1e18' }), 'body/valueWei');
    });
  });

  it.each([
    ['no Authorization header', undefined],
    ['the admin key', 'admin'],
    ['a malformed bearer token', 'sgp_agent_short'],
  ])('401 with %s, titled exactly "Agent bearer key required"', async (_name, which) => {
    const key = which === 'admin' ? p.adminKey : which;
    for (const [name, call] of everyEndpoint(t, p.policyId, chainId, key)) {
      const problem = expectProblem(await call(), 401, 'agent_bearer_key_required');
      expect(problem.title, name).toBe('Agent bearer key required');
    }
  });

  it('404 for an unknown chain, an unknown policy, and a key of another policy (indistinguishable)', async () => {
    const unknown = expectProblem(await readChain(t, UNKNOWN_CHAIN_ID, p.agentKey), 404, 'not_found');
    for (const [name, call] of everyEndpoint(t, p.policyId, chainId, other.agentKey)) {
      const problem = expectProblem(await call(), 404, 'not_found');
      expect(problem.detail, name).toBe(name === 'create' ? 'policy or key not found' : unknown.detail);
      expect(problem.detail).not.toContain(chainId);
    }
    expectProblem(await createChainRaw(t, p.agentKey, intentBody(UNKNOWN_POLICY_ID)), 404, 'not_found');
  });

  it('404 when the evidence layer is turned off (EVIDENCE_CHAINS=off)', async () => {
    const off = await createTestApp({ config: { evidenceChains: false } });
    try {
      const q = await createPolicy(off);
      expectProblem(await createChainRaw(off, q.agentKey, intentBody(q.policyId)), 404, 'route_not_found');
      expectProblem(await readChain(off, UNKNOWN_CHAIN_ID, q.agentKey), 404, 'route_not_found');
      const catalogue = json(await off.app.inject({ method: 'GET', url: '/api/services' }));
      expect(catalogue.evidenceLayer).toMatchObject({ createRead: 'not enabled on this deployment', directChecks: 'not enabled on this deployment' });
    } finally {
      await off.close();
    }
  });

  it.each([
    ['policy', { status: 'inactive' }],
    ['agent', { agentStatus: 'inactive' }],
  ])('403 on every endpoint while the %s is inactive; 200 again once active', async (_who, change) => {
    const q = await createPolicy(t);
    const id = (await createChain(t, q)).evidenceChainId;
    expect((await putPolicy(t, q.policyId, { policy: rules(), ...change }, bearer(q.adminKey))).statusCode).toBe(200);
    for (const [name, call] of everyEndpoint(t, q.policyId, id, q.agentKey)) {
      const problem = expectProblem(await call(), 403, 'inactive');
      expect(problem.detail, name).toMatch(/inactive/);
    }
    expect((await putPolicy(t, q.policyId, { policy: rules(), status: 'active', agentStatus: 'active' }, bearer(q.adminKey))).statusCode).toBe(200);
    expect((await readChain(t, id, q.agentKey)).statusCode).toBe(200);
  });

  it('503 "Direct pilot checks not enabled" for preflight and settlement until the operator turns them on', async () => {
    for (const call of [() => attachPreflight(t, chainId, p.agentKey, preflightBody), () => settle(t, chainId, p.agentKey, { txHash: randomTxHash() })]) {
      const problem = expectProblem(await call(), 503, 'direct_checks_disabled');
      expect(problem.title).toBe('Direct pilot checks not enabled');
    }
    // Nothing was appended.
    expect(json(await readChain(t, chainId, p.agentKey)).events).toHaveLength(1);
  });

  it('410 on every endpoint once pilot access has expired, before and after the purge', async () => {
    const q = await createPolicy(t);
    const id = (await createChain(t, q)).evidenceChainId;
    await new PolicyStore(t.database).setDirectChecks(q.policyId, true, t.clock.now());
    const saved = t.clock.now();
    t.clock.advance(30 * 86_400_000 + 1000);
    try {
      for (const [, call] of everyEndpoint(t, q.policyId, id, q.agentKey)) expectProblem(await call(), 410, 'expired');
      const purged = await purgeExpired(t.database, t.clock.now());
      expect(purged.evidenceChains).toBeGreaterThanOrEqual(1);
      expect(await t.database.db.selectFrom('evidence_chains').select('id').where('id', '=', id).executeTakeFirst()).toBeUndefined();
      for (const [, call] of everyEndpoint(t, q.policyId, id, q.agentKey)) expectProblem(await call(), 410, 'expired');
    } finally {
      t.clock.set(saved);
    }
  });

  it("an expired key gets 410 for another live policy's chain, exactly as for an unknown chain", async () => {
    const old = await createPolicy(t);
    const saved = t.clock.now();
    t.clock.advance(20 * 86_400_000);
    try {
      const fresh = await createPolicy(t);
      const id = (await createChain(t, fresh)).evidenceChainId;
      t.clock.advance(11 * 86_400_000);
      const unknown = expectProblem(await readChain(t, UNKNOWN_CHAIN_ID, old.agentKey), 410, 'expired');
      const foreign = expectProblem(await readChain(t, id, old.agentKey), 410, 'expired');
      expect(foreign.detail).toBe(unknown.detail);
      expect((await readChain(t, id, fresh.agentKey)).statusCode).toBe(200);
    } finally {
      t.clock.set(saved);
    }
  });
});

describe('429: the per-policy evidence request limit', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp({ config: { rateLimits: true, evidenceLimit: 3, policyCreateLimit: 100 } });
  });
  afterAll(async () => {
    await t.close();
  });

  it('answers 429 with Retry-After once a policy used its limit; another policy is unaffected', async () => {
    const p = await createPolicy(t);
    const q = await createPolicy(t);
    const id = (await createChain(t, p)).evidenceChainId;
    expect((await readChain(t, id, p.agentKey)).statusCode).toBe(200);
    expect((await readSummary(t, id, p.agentKey)).statusCode).toBe(200);
    for (const call of [() => readChain(t, id, p.agentKey), () => createChainRaw(t, p.agentKey, intentBody(p.policyId)), () => settle(t, id, p.agentKey, { txHash: randomTxHash() })]) {
      const res = await call();
      const problem = expectProblem(res, 429, 'rate_limited');
      expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
      expect(Number(res.headers['retry-after'])).toBeLessThanOrEqual(3600);
      expect(problem.detail).toMatch(/policy/);
    }
    expect((await createChainRaw(t, q.agentKey, intentBody(q.policyId))).statusCode).toBe(201);
  });
});

describe('503: storage unavailable', () => {
  it('answers 503 without internals when the database is gone', async () => {
    const t = await createTestApp();
    const p = await createPolicy(t);
    const id = (await createChain(t, p)).evidenceChainId;
    await t.database.close();
    try {
      for (const call of [() => readChain(t, id, p.agentKey), () => createChainRaw(t, p.agentKey, intentBody(p.policyId)), () => readSummary(t, id, p.agentKey)]) {
        const res = await call();
        const problem = expectProblem(res, 503, 'storage_unavailable');
        expect(problem.detail).toBe('evidence storage is unavailable; retry the request unchanged (a chain retried with the same requestId is never created twice)');
        expect(res.headers['retry-after']).toBe('5');
      }
    } finally {
      await t.app.close();
      await t.database.drop().catch(() => {});
    }
  });
});

it('documents every evidence endpoint in the OpenAPI document with its statuses', async () => {
  const t = await createTestApp();
  try {
    const doc = json(await t.app.inject({ method: 'GET', url: '/openapi.json' }));
    const ops = [
      ['post', CHAINS, ['200', '201', '400', '401', '403', '404', '409', '410', '429', '503']],
      ['get', `${CHAINS}/{evidenceChainId}`, ['200', '400', '401', '403', '404', '410', '429', '503']],
      ['get', `${CHAINS}/{evidenceChainId}/summary`, ['200', '401', '404']],
      ['post', `${CHAINS}/{evidenceChainId}/preflight`, ['200', '409', '503']],
      ['post', `${CHAINS}/{evidenceChainId}/settlement`, ['200', '409', '503']],
    ] as const;
    for (const [method, path, statuses] of ops) {
      const op = doc.paths[path]?.[method];
      expect(op, `${method} ${path}`).toBeDefined();
      for (const s of statuses) expect(op.responses[s], `${method} ${path} ${s}`).toBeDefined();
      expect(op.security).toEqual([{ agentKey: [] }]);
    }
    const intent = doc.paths[CHAINS].post.requestBody.content['application/json'].schema;
    expect(intent.additionalProperties).toBe(false);
    expect(intent.required.sort()).toEqual(['agentId', 'amount', 'asset', 'chain', 'policyId', 'recipient', 'requestId']);
  } finally {
    await t.close();
  }
});
