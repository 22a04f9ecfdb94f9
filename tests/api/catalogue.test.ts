import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAddress } from 'viem';
import type { App } from '../../src/app.js';
import { NETWORK, PAID_REPORTS, USDC_ADDRESS } from '../../src/platform/prices.js';
import { ADDR, createTestApp, createTestAppWith, json, type TestApp } from '../helpers/app.js';

interface Entry {
  name: string;
  endpoint: string;
  method: string;
  network: string;
  paymentAsset: { symbol: string; address: string; decimals: number };
  price: string;
  description: string;
  inputSchema: Record<string, any> | null;
}

const FREE_ENDPOINTS = ['/api/token-preview', '/api/token-coverage', '/api/spendpolicy/evaluate'];

function expectEntry(e: Entry) {
  expect(typeof e.name).toBe('string');
  expect(e.name.length).toBeGreaterThan(0);
  expect(e.endpoint).toMatch(/^\/api\//);
  expect(['GET', 'POST']).toContain(e.method);
  expect(e.network).toBe('eip155:8453');
  expect(e.paymentAsset).toEqual({ symbol: 'USDC', address: USDC_ADDRESS, decimals: 6 });
  expect(e.price).toMatch(/^[0-9]+(\.[0-9]{1,6})?$/);
  expect(typeof e.description).toBe('string');
  expect(e.description.length).toBeGreaterThan(10);
  expect('inputSchema' in e).toBe(true);
  if (e.method === 'POST') {
    expect(e.inputSchema).toMatchObject({ type: 'object', additionalProperties: false });
    expect(Array.isArray(e.inputSchema!.required)).toBe(true);
  }
}

function evaluateBody() {
  return {
    agentId: 'a',
    requestId: 'r',
    chain: 'base',
    asset: 'USDC',
    recipient: ADDR.alice,
    amount: '1',
    policy: { maxPerTransaction: '2', remainingDailyBudget: '2', requireHumanAbove: '2', maxRepeats: 1, allowedRecipients: [], blockUnknownRecipients: false },
  };
}

describe('GET /api/services', () => {
  let t: TestApp;
  let catalogue: any;
  beforeAll(async () => {
    t = await createTestApp();
    const res = await t.app.inject({ method: 'GET', url: '/api/services' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    catalogue = json(res);
  });
  afterAll(async () => {
    await t.close();
  });

  it('states the service-wide invariants and the x402 version', () => {
    expect(catalogue.x402).toBe(true);
    expect(catalogue.x402Version).toBe(2);
    expect(catalogue.automaticPayment).toBe(false);
    expect(catalogue.executionAuthorized).toBe(false);
    expect(catalogue.version).toBe('1.5.0-rc.1');
  });

  it('lists the free evaluation with every field the specification names', () => {
    const tools: Entry[] = catalogue.freeTools;
    expect(Array.isArray(tools)).toBe(true);
    for (const e of tools) {
      expectEntry(e);
      expect(e.price).toBe('0');
      expect(FREE_ENDPOINTS).toContain(e.endpoint);
    }
    const evaluate = tools.find((e) => e.endpoint === '/api/spendpolicy/evaluate');
    expect(evaluate).toMatchObject({ method: 'POST', price: '0' });
    expect(Object.keys(evaluate!.inputSchema!.properties).sort()).toEqual(
      ['agentId', 'amount', 'asset', 'chain', 'context', 'policy', 'recipient', 'requestId'],
    );
  });

  it('the published input schema accepts what the service accepts and rejects what it rejects', async () => {
    const evaluate = (catalogue.freeTools as Entry[]).find((e) => e.endpoint === '/api/spendpolicy/evaluate')!;
    const ajv = addFormats.default(new Ajv.default({ strict: false }));
    // The address format, as its description states it: mixed case carries a valid EIP-55 checksum.
    ajv.addFormat('evm-address', (s: string) => s.slice(2) === s.slice(2).toLowerCase() || s.slice(2) === s.slice(2).toUpperCase() || isAddress(s, { strict: true }));
    const validate = ajv.compile(evaluate.inputSchema!);
    const good = evaluateBody();
    expect(validate(good)).toBe(true);
    expect((await t.app.inject({ method: 'POST', url: '/api/spendpolicy/evaluate', payload: good })).statusCode).toBe(200);
    for (const bad of [{ ...good, amount: '1.0000001' }, { ...good, recipient: ADDR.mixedCase.replace('abCD', 'abCd') }]) {
      expect(validate(bad)).toBe(false);
      expect((await t.app.inject({ method: 'POST', url: '/api/spendpolicy/evaluate', payload: bad })).statusCode).toBe(400);
    }
  });

  it('lists only endpoints this build serves', () => {
    const entries: Entry[] = [...catalogue.freeTools, ...catalogue.paidServices];
    for (const e of entries) expect(t.app.hasRoute({ method: e.method as 'GET', url: e.endpoint }), e.endpoint).toBe(true);
    for (const [, r] of Object.entries(PAID_REPORTS)) {
      const listed = entries.some((e) => e.endpoint === r.path);
      expect(listed, r.path).toBe(t.app.hasRoute({ method: r.method, url: r.path }));
    }
  });

  it('describes the evidence layer', () => {
    const layer = catalogue.evidenceLayer;
    expect(Object.keys(layer).sort()).toEqual(
      ['auth', 'automaticPayment', 'createRead', 'directChecks', 'endpoint', 'executionAuthorized', 'release'].sort(),
    );
    expect(layer.release).toContain('1.5.0-rc.1');
    expect(layer.release).toMatch(/release candidate/i);
    expect(layer.endpoint).toBe('/api/evidence-chains');
    expect(layer.auth).toMatch(/agent/i);
    expect(layer.auth).toMatch(/bearer/i);
    expect(typeof layer.createRead).toBe('string');
    expect(layer.directChecks).toMatch(/pilot/i);
    expect(layer.automaticPayment).toBe(false);
    expect(layer.executionAuthorized).toBe(false);
    // createRead tells the truth about this build
    const served = t.app.hasRoute({ method: 'POST', url: '/api/evidence-chains' });
    expect(layer.createRead).toBe(served ? 'available' : 'not enabled on this deployment');
  });

  it('links to the OpenAPI document, terms and privacy policy, and each link resolves', async () => {
    const { links } = catalogue;
    expect(Object.keys(links).sort()).toEqual(['openapi', 'privacy', 'terms']);
    expect(links.openapi).toBe(`${t.config.publicBaseUrl}/openapi.json`);
    expect(links.terms).toBe(`${t.config.publicBaseUrl}/terms`);
    expect(links.privacy).toBe(`${t.config.publicBaseUrl}/privacy`);

    const openapi = await t.app.inject({ method: 'GET', url: new URL(links.openapi).pathname });
    expect(openapi.statusCode).toBe(200);
    expect(json(openapi).openapi).toBe('3.1.0');

    const terms = await t.app.inject({ method: 'GET', url: new URL(links.terms).pathname });
    expect(terms.statusCode).toBe(200);
    expect(terms.headers['content-type']).toMatch(/^text\/plain/);
    expect(terms.body).toMatch(/terms/i);
    expect(terms.body).toMatch(/never .*authorizes a payment/i);

    const privacy = await t.app.inject({ method: 'GET', url: new URL(links.privacy).pathname });
    expect(privacy.statusCode).toBe(200);
    expect(privacy.headers['content-type']).toMatch(/^text\/plain/);
    expect(privacy.body).toMatch(/privacy/i);
    expect(privacy.body).toContain('90 days');
  });

  it('answers HEAD like GET without a body', async () => {
    const res = await t.app.inject({ method: 'HEAD', url: '/api/services' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('');
  });
});

describe('catalogue of paid services', () => {
  // The paid routes arrive in a later issue. Stand-ins registered before the app is ready show
  // what the catalogue lists for them, priced from the one price table.
  let t: TestApp;
  let catalogue: any;
  const stubbed: string[] = [];
  beforeAll(async () => {
    t = await createTestAppWith(
      (app: App) => {
        const all = [...Object.values(PAID_REPORTS), { path: '/api/token-preview', method: 'POST' as const }, { path: '/api/token-coverage', method: 'POST' as const }];
        for (const r of all) {
          if (app.hasRoute({ method: r.method, url: r.path })) continue;
          stubbed.push(r.path);
          app.route({ method: r.method, url: r.path, handler: async () => ({ stub: true }) });
        }
      },
      { config: { publicBaseUrl: 'https://pay.example.com' } },
    );
    catalogue = json(await t.app.inject({ method: 'GET', url: '/api/services' }));
  });
  afterAll(async () => {
    await t?.close();
  });

  it('lists every paid report with the price of the price table', () => {
    const paid: Entry[] = catalogue.paidServices;
    expect(paid.map((e) => e.endpoint).sort()).toEqual(Object.values(PAID_REPORTS).map((r) => r.path).sort());
    const expected: Record<string, { method: string; price: string }> = {
      '/api/token-risk': { method: 'POST', price: '0.25' },
      '/api/transaction-preflight': { method: 'POST', price: '0.05' },
      '/api/verify-payment': { method: 'POST', price: '0.01' },
      '/api/quick-check': { method: 'GET', price: '0.001' },
    };
    for (const e of paid) {
      expectEntry(e);
      expect(e.network).toBe(NETWORK);
      expect({ method: e.method, price: e.price }).toEqual(expected[e.endpoint]);
    }
  });

  it('gives each paid report the input schema of its request', () => {
    const by = (p: string) => (catalogue.paidServices as Entry[]).find((e) => e.endpoint === p)!;
    expect(by('/api/token-risk').inputSchema!.required.sort()).toEqual(['address', 'chain']);
    expect(by('/api/transaction-preflight').inputSchema!.required.sort()).toEqual(['chain', 'to']);
    expect(Object.keys(by('/api/transaction-preflight').inputSchema!.properties).sort()).toEqual(['chain', 'data', 'from', 'to', 'valueWei']);
    expect(by('/api/verify-payment').inputSchema!.required.sort()).toEqual(['chain', 'expectedAmount', 'expectedTo', 'txHash']);
    // the quick check takes no body and no parameters
    expect(by('/api/quick-check').inputSchema).toBeNull();
  });

  it('lists all three free tools, each free', () => {
    const tools: Entry[] = catalogue.freeTools;
    expect(tools.map((e) => e.endpoint).sort()).toEqual([...FREE_ENDPOINTS].sort());
    for (const e of tools) {
      expectEntry(e);
      expect(e.price).toBe('0');
    }
  });

  it('builds its links from PUBLIC_BASE_URL', () => {
    expect(catalogue.links).toEqual({
      openapi: 'https://pay.example.com/openapi.json',
      terms: 'https://pay.example.com/terms',
      privacy: 'https://pay.example.com/privacy',
    });
  });
});
