import { PassThrough } from 'node:stream';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loggerOptions, redactKeys } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
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
      expect((await t.app.inject(a)).statusCode, String(a.url)).not.toBe(500);
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
    expect(redactKeys(`/x/${'A'.repeat(43)}/y`)).toBe('/x/[redacted]/y');
  });
});
