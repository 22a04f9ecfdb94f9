// Every answer of a paid route and of the order routes is `Cache-Control: no-store`: a paid report
// carries the payer's signed receipt and PAYMENT-RESPONSE, a 202 may carry a one-time recovery
// key, and the quick check is a GET whose only credential (PAYMENT-SIGNATURE) is not in Vary. A
// shared cache that stored such an answer would hand it to the next caller, unpaid.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordingPayingFetch, startHoldingStack, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
});
afterAll(async () => {
  await s?.close();
});

const postJson = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
const expectNoStore = (res: Response, status: number) => {
  expect(res.status).toBe(status);
  expect(res.headers.get('cache-control'), `${status} ${res.url}`).toBe('no-store');
};
const ADDRESS = '0x1111111111111111111111111111111111111111';

describe('Cache-Control: no-store', () => {
  it('on a paid 200 (report, receipt and PAYMENT-RESPONSE) and on its replay', async () => {
    const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
    expectNoStore(await pay(`${s.url}/api/quick-check`), 200);
    expectNoStore(await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': signatures.at(-1)! } }), 200);
  });

  it('on the 402 challenge and on problem answers of the paid routes', async () => {
    expectNoStore(await fetch(`${s.url}/api/quick-check`), 402);
    expectNoStore(await postJson('/api/verify-payment', { chain: 'base', txHash: `0x${'ab'.repeat(32)}`, expectedTo: ADDRESS, expectedAmount: '1' }), 402);
    // a header that is no payment; schema validation (Fastify's), the report's own check, a malformed body
    expectNoStore(await postJson('/api/verify-payment', { chain: 'base' }), 400);
    expectNoStore(await postJson('/api/transaction-preflight', { chain: 'base', to: ADDRESS, valueWei: (2n ** 256n).toString() }), 400);
    expectNoStore(await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': 'garbage' } }), 402);
    expectNoStore(await fetch(`${s.url}/api/token-risk`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' }), 400);
    expectNoStore(await fetch(`${s.url}/api/quick-check`, { headers: { 'report-id': `ord_${'0'.repeat(32)}`, 'recovery-key': 'x' } }), 404);
  });

  it('on a 202 that carries the one-time recovery key', async () => {
    const holding = await startHoldingStack(s);
    try {
      const res = await recordingPayingFetch(holding.stack, 2).fetch(`${holding.stack.url}/api/quick-check`);
      expectNoStore(res, 202);
      expect((await res.json()).recoveryKey).toMatch(/^ork_/);
    } finally {
      await Promise.all(holding.held.map((release) => release().catch(() => {})));
      await holding.close();
    }
  });

  it('on every answer of /api/orders and /api/orders/recover', async () => {
    const created = await postJson('/api/orders', { path: '/api/quick-check', input: {} });
    expectNoStore(created, 201);
    const order = (await created.json()) as { id: string; key: string };
    expectNoStore(await postJson('/api/orders', { path: '/api/quick-check', input: { x: 1 } }), 400);
    expectNoStore(await postJson('/api/orders/recover', { id: order.id, key: order.key }), 202);
    expectNoStore(await postJson('/api/orders/recover', { id: order.id, key: `${order.key}x` }), 404);
    expectNoStore(await postJson('/api/orders/recover', { id: order.id }), 400);

    const paid = await recordingPayingFetch(s, 3).fetch(`${s.url}/api/quick-check`, { headers: { 'report-id': order.id, 'recovery-key': order.key } });
    expectNoStore(paid, 200);
    expectNoStore(await postJson('/api/orders/recover', { id: order.id, key: order.key }), 200);
  });
});
