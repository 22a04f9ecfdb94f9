// Recovery orders end to end (create before paying, pay with Report-Id/Recovery-Key through the
// official client, restore), CORS for browser clients of the paid routes, and the rule that a 402
// challenge never charges.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { randomBytes } from 'node:crypto';
import { purgeExpired } from '../../src/features/maintenance.js';
import { OrderStore } from '../../src/features/orders/store.js';
import { PAID_REPORTS } from '../../src/platform/prices.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import { asInjected, eventually, recordingPayingFetch, signPayment, startHoldingStack, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
});
afterAll(async () => {
  await s?.close();
});

const PROOF_PRICE = 10_000n;
const addressOf = (i: number) => s.devnet.accounts[i]!.address;
const postJson = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
const proofInput = (expectedAmount = '0.01') => ({ chain: 'base', txHash: `0x${randomBytes(32).toString('hex')}`, expectedTo: s.payTo, expectedAmount });
const createOrder = async (path: string, input: unknown) => {
  const res = await postJson('/api/orders', { path, input });
  expect(res.status, await res.clone().text()).toBe(201);
  return (await res.json()) as { id: string; key: string; expiresAt: string };
};
async function ledger(payer: string) {
  const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
  return async (charged: bigint) => {
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + charged);
    expect(await s.balanceOf(payer)).toBe(payer0 - charged);
  };
}

const ADDRESS = '0x1111111111111111111111111111111111111111';
/** For each paid path: a valid input and an invalid one, per the specification. */
const INPUTS: Record<string, { valid: Record<string, unknown>; invalid: Record<string, unknown> }> = {
  '/api/token-risk': { valid: { chain: 'base', address: ADDRESS }, invalid: { chain: 'base', address: '0x12' } },
  '/api/transaction-preflight': { valid: { chain: 'base', to: ADDRESS, valueWei: '1', data: '0xabcd' }, invalid: { chain: 'base', to: ADDRESS, data: '0xabc' } },
  '/api/verify-payment': { valid: { chain: 'base', txHash: `0x${'ab'.repeat(32)}`, expectedTo: ADDRESS, expectedAmount: '1.5' }, invalid: { chain: 'base', txHash: `0x${'ab'.repeat(32)}`, expectedTo: ADDRESS, expectedAmount: '1.1234567' } },
  '/api/quick-check': { valid: {}, invalid: { anything: 1 } },
};

describe('creating recovery orders', () => {
  const served = (path: string) => {
    const report = Object.values(PAID_REPORTS).find((r) => r.path === path)!;
    return s.t.app.hasRoute({ method: report.method, url: path });
  };

  it.each(Object.keys(INPUTS))('%s: 201 { id, key, expiresAt } for a valid input (400 while the report is not served)', async (path) => {
    const res = await postJson('/api/orders', { path, input: INPUTS[path]!.valid });
    if (!served(path)) {
      // Later issues add token risk and transaction preflight; until then no order can be paid for.
      const problem = expectProblem(await asInjected(res), 400, 'invalid_request');
      expect(problem.detail).toMatch(/not served/);
      return;
    }
    expect(res.status).toBe(201);
    const order = await res.json();
    expect(Object.keys(order).sort()).toEqual(['expiresAt', 'id', 'key']);
    expect(order.id).toMatch(/^ord_[0-9a-f]{32}$/);
    expect(typeof order.key).toBe('string');
    expect(order.key.length).toBeGreaterThanOrEqual(32);
    expect(order.expiresAt).toBe(new Date(s.t.clock.now().getTime() + 7 * 86_400_000).toISOString());
    // Only the key's hash is stored.
    const row = await s.t.database.db.selectFrom('orders').selectAll().where('id', '=', order.id).executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain(order.key);
  });

  it.each(Object.keys(INPUTS))('%s: 400 for an input that report would refuse', async (path) => {
    const res = await asInjected(await postJson('/api/orders', { path, input: INPUTS[path]!.invalid }));
    if (served(path)) expectInvalid(res);
    else expectProblem(res, 400, 'invalid_request');
  });

  it('400 for an input that passes the schema but not the report\'s own check (preflight valueWei above 2^256 - 1)', async () => {
    const input = (valueWei: string) => ({ chain: 'base', to: ADDRESS, valueWei });
    // The paid route refuses it before asking for payment, naming the field in its body...
    const paid = expectInvalid(await asInjected(await postJson('/api/transaction-preflight', input((2n ** 256n).toString()))), 'body/valueWei');
    expect(paid.detail).toMatch(/2\^256 - 1/);
    // ...and so does an order for it, naming the field in the order's input.
    const order = expectInvalid(await asInjected(await postJson('/api/orders', { path: '/api/transaction-preflight', input: input('9'.repeat(78)) })), 'body/input/valueWei');
    expect(order.detail).toMatch(/2\^256 - 1/);
    const count = await s.t.database.db.selectFrom('orders').select('id').where('path', '=', '/api/transaction-preflight').execute();
    // The largest value the report accepts makes an order.
    expect((await postJson('/api/orders', { path: '/api/transaction-preflight', input: input((2n ** 256n - 1n).toString()) })).status).toBe(201);
    expect(await s.t.database.db.selectFrom('orders').select('id').where('path', '=', '/api/transaction-preflight').execute()).toHaveLength(count.length + 1);
  });

  it('400 for an unknown path, a missing input or another property', async () => {
    expectInvalid(await asInjected(await postJson('/api/orders', { path: '/api/token-preview', input: {} })));
    expectInvalid(await asInjected(await postJson('/api/orders', { path: '/api/quick-check/', input: {} })));
    expectInvalid(await asInjected(await postJson('/api/orders', { path: '/api/quick-check' })));
    expectInvalid(await asInjected(await postJson('/api/orders', { path: '/api/quick-check', input: {}, txHash: `0x${'00'.repeat(32)}` })));
    expectInvalid(await asInjected(await postJson('/api/orders', { path: '/api/quick-check', input: [] })));
  });
});

describe('restoring through a recovery order', () => {
  it('404 for an unknown id or a wrong key (never telling which)', async () => {
    const order = await createOrder('/api/quick-check', {});
    const unknown = expectProblem(await asInjected(await postJson('/api/orders/recover', { id: `ord_${'0'.repeat(32)}`, key: order.key })), 404, 'not_found');
    const wrong = expectProblem(await asInjected(await postJson('/api/orders/recover', { id: order.id, key: `${order.key}x` })), 404, 'not_found');
    expect(wrong.detail).toBe(unknown.detail);
    expectProblem(await asInjected(await postJson('/api/orders/recover', { id: 'nonsense', key: 'nonsense' })), 404, 'not_found');
    expectInvalid(await asInjected(await postJson('/api/orders/recover', { id: order.id })));
    expectInvalid(await asInjected(await postJson('/api/orders/recover', { id: order.id, key: order.key, txHash: '0x12' })));
  });

  it('202 unpaid before paying; 200 with the same report after paying with Report-Id/Recovery-Key; never charged twice', async () => {
    const payer = addressOf(1);
    const charged = await ledger(payer);
    const input = proofInput();
    const order = await createOrder('/api/verify-payment', input);

    const before = await postJson('/api/orders/recover', { id: order.id, key: order.key });
    expect(before.status).toBe(202);
    expect(await before.json()).toMatchObject({ status: 'unpaid', orderId: order.id, retryAfter: expect.any(Number) });
    expect(Number(before.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(before.headers.get('payment-required')).toBeNull(); // recovery never asks for a payment

    const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
    const paid = await pay(`${s.url}/api/verify-payment`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'Report-Id': order.id, 'Recovery-Key': order.key },
      body: JSON.stringify(input),
    });
    expect(paid.status).toBe(200);
    const { receipt, ...report } = await paid.json();
    expect(signatures).toHaveLength(1);
    await charged(PROOF_PRICE);

    const restored = await postJson('/api/orders/recover', { id: order.id, key: order.key });
    expect(restored.status).toBe(200);
    expect(await restored.json()).toEqual({ report, receipt });

    // The order's headers alone now deliver the report; the official client is never asked to pay.
    const again = await pay(`${s.url}/api/verify-payment`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'Report-Id': order.id, 'Recovery-Key': order.key },
      body: JSON.stringify(input),
    });
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ ...report, receipt });
    expect(signatures).toHaveLength(1);
    await charged(PROOF_PRICE);
  });

  it('one order buys one report: two payments racing for the same order are charged once', async () => {
    const payer = addressOf(7);
    const charged = await ledger(payer);
    const input = proofInput();
    const order = await createOrder('/api/verify-payment', input);
    const init = { method: 'POST', headers: { 'content-type': 'application/json', 'Report-Id': order.id, 'Recovery-Key': order.key }, body: JSON.stringify(input) };
    // Two official clients (say, a retry after a lost answer) each authorize their own payment.
    const a = recordingPayingFetch(s, 7);
    const b = recordingPayingFetch(s, 7);
    const answers = await Promise.all([a.fetch(`${s.url}/api/verify-payment`, init), b.fetch(`${s.url}/api/verify-payment`, init)]);
    // One bought the report; the other delivered it too, is told to restore it (202) or that
    // another payment holds the order (409): never a second settlement.
    for (const res of answers) expect([200, 202, 409], await res.clone().text()).toContain(res.status);
    expect(answers.filter((r) => r.status === 409).length).toBeLessThan(2);
    for (const res of answers.filter((r) => r.status === 409)) expect((await res.clone().json()).code).toBe('payment_conflict');
    await charged(PROOF_PRICE);

    const restored = await postJson('/api/orders/recover', { id: order.id, key: order.key });
    expect(restored.status).toBe(200);
    const { report, receipt } = await restored.json();
    for (const res of answers.filter((r) => r.status === 200)) expect(await res.json()).toEqual({ ...report, receipt });
    await charged(PROOF_PRICE);
  });

  it('a payment whose copy without the order headers stored first still binds the order it was sent with: the order restores the report', async () => {
    // A client retried one signed payment, once without Report-Id/Recovery-Key (a proxy that drops
    // them, a retry path that forgets them) and once with them; the copy without them was stored
    // first. The order the client keeps must restore what its payment bought, never answer "no
    // payment has been received" (which would have it pay again).
    const payer = addressOf(8);
    const charged = await ledger(payer);
    const input = proofInput();
    const order = await createOrder('/api/verify-payment', input);
    const init = (headers: Record<string, string>) => ({ method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(input) });
    const sig = await signPayment(s, 8, `${s.url}/api/verify-payment`, init({}));
    const bare = await fetch(`${s.url}/api/verify-payment`, init({ 'payment-signature': sig }));
    expect(bare.status, await bare.clone().text()).toBe(200);
    const { receipt, ...report } = await bare.json();
    const withOrder = await fetch(`${s.url}/api/verify-payment`, init({ 'payment-signature': sig, 'Report-Id': order.id, 'Recovery-Key': order.key }));
    expect(withOrder.status, await withOrder.clone().text()).toBe(200);
    expect(await withOrder.json()).toEqual({ ...report, receipt });

    const restored = await postJson('/api/orders/recover', { id: order.id, key: order.key });
    expect(restored.status, await restored.clone().text()).toBe(200);
    expect(await restored.json()).toEqual({ report, receipt });
    await charged(PROOF_PRICE);
  });

  it('while such a payment is pending, the 202s name the order the caller sent, not the one its other copy was given', async () => {
    const hold = await startHoldingStack(s);
    try {
      const url = `${hold.stack.url}/api/quick-check`;
      const res = await fetch(`${hold.stack.url}/api/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: '/api/quick-check', input: {} }) });
      const order = (await res.json()) as { id: string; key: string };
      const sig = await signPayment(hold.stack, 9, url);
      const bare = await fetch(url, { headers: { 'payment-signature': sig } });
      expect(bare.status, await bare.clone().text()).toBe(202);
      const other = (await bare.json()) as { orderId: string };
      expect(other.orderId).not.toBe(order.id);

      const withOrder = await fetch(url, { headers: { 'payment-signature': sig, 'Report-Id': order.id, 'Recovery-Key': order.key } });
      expect(withOrder.status, await withOrder.clone().text()).toBe(202);
      expect(await withOrder.json()).toMatchObject({ status: 'pending', orderId: order.id });
      const recover = () => fetch(`${hold.stack.url}/api/orders/recover`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: order.id, key: order.key }) });
      const pending = await recover();
      expect(pending.status).toBe(202);
      expect(await pending.json()).toMatchObject({ status: 'pending', orderId: order.id });

      // Once the transfer lands, the caller's order restores the report.
      await hold.held[0]!();
      await eventually(async () => (await recover()).status === 200, 'the report restored through the order');
    } finally {
      await hold.close();
    }
  });

  it('such a payment still delivers its report when the order it names is purged just before it is bound', async () => {
    const url = `${s.url}/api/quick-check`;
    const order = await createOrder('/api/quick-check', {});
    const sig = await signPayment(s, 1, url);
    const bare = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(bare.status, await bare.clone().text()).toBe(200);
    const report = await bare.json();
    // The order was open when the request read it; its period ends and the purge runs before the bind.
    const original = OrderStore.prototype.bind;
    const bind = vi.spyOn(OrderStore.prototype, 'bind').mockImplementationOnce(async function (this: OrderStore, ...args) {
      await s.t.database.db.updateTable('orders').set({ input: '', input_digest: '', report_id: null }).where('id', '=', order.id).execute();
      return original.call(this, ...args);
    });
    try {
      const withOrder = await fetch(url, { headers: { 'payment-signature': sig, 'Report-Id': order.id, 'Recovery-Key': order.key } });
      expect(withOrder.status, await withOrder.clone().text()).toBe(200);
      expect(await withOrder.json()).toEqual(report);
      expect(bind).toHaveBeenCalledTimes(1);
    } finally {
      bind.mockRestore();
    }
  });

  it('409 for a paid request whose Report-Id was made for another input or report; nothing asked, nothing charged', async () => {
    const payer = addressOf(2);
    const charged = await ledger(payer);
    const input = proofInput();
    const order = await createOrder('/api/verify-payment', input);
    const { fetch: pay, signatures } = recordingPayingFetch(s, 2);
    const headers = { 'content-type': 'application/json', 'Report-Id': order.id, 'Recovery-Key': order.key };

    const other = await pay(`${s.url}/api/verify-payment`, { method: 'POST', headers, body: JSON.stringify({ ...input, expectedAmount: '0.02' }) });
    expectProblem(await asInjected(other), 409, 'payment_conflict');
    expect(other.headers.get('payment-required')).toBeNull();
    const elsewhere = await pay(`${s.url}/api/quick-check`, { headers });
    expectProblem(await asInjected(elsewhere), 409, 'payment_conflict');
    expect(signatures).toHaveLength(0);

    // Half the credentials, or the wrong key: refused before any challenge too.
    expectProblem(await asInjected(await postJson('/api/verify-payment', input, { 'Report-Id': order.id })), 400, 'invalid_request');
    expectProblem(await asInjected(await postJson('/api/verify-payment', input, { 'Report-Id': order.id, 'Recovery-Key': `${order.key}x` })), 404, 'not_found');
    await charged(0n);

    // The order is still unpaid and usable for its own input.
    const recover = await postJson('/api/orders/recover', { id: order.id, key: order.key });
    expect(await recover.json()).toMatchObject({ status: 'unpaid' });
  });

  it('410 once the recovery period has ended, for recover and for paid requests naming the order; nothing charged', async () => {
    const payer = addressOf(3);
    const charged = await ledger(payer);
    const paidOrder = await createOrder('/api/quick-check', {});
    const { fetch: pay } = recordingPayingFetch(s, 3);
    const ok = await pay(`${s.url}/api/quick-check`, { headers: { 'Report-Id': paidOrder.id, 'Recovery-Key': paidOrder.key } });
    expect(ok.status).toBe(200);
    await charged(1_000n);
    const unpaidOrder = await createOrder('/api/quick-check', {});

    // Both orders answer 410, on recover and on a paid request naming them; a wrong key is still a 404.
    const expectExpired = async () => {
      for (const order of [paidOrder, unpaidOrder]) {
        expectProblem(await asInjected(await postJson('/api/orders/recover', { id: order.id, key: order.key })), 410, 'recovery_expired');
        const res = await pay(`${s.url}/api/quick-check`, { headers: { 'Report-Id': order.id, 'Recovery-Key': order.key } });
        expectProblem(await asInjected(res), 410, 'recovery_expired');
      }
      expectProblem(await asInjected(await postJson('/api/orders/recover', { id: paidOrder.id, key: 'ork_wrong' })), 404, 'not_found');
    };

    const start = s.t.clock.now();
    try {
      // Still restorable on its last millisecond...
      s.t.clock.advance(s.t.config.recoveryTtlSeconds * 1000 - 1);
      expect((await postJson('/api/orders/recover', { id: paidOrder.id, key: paidOrder.key })).status).toBe(200);
      // ... and expired from then on.
      s.t.clock.advance(1);
      await expectExpired();

      // The purge removes what the orders held, and they keep answering 410, not a 404 that
      // would tell the caller its key is wrong.
      expect((await purgeExpired(s.t.database, s.t.clock.now())).orders).toBeGreaterThanOrEqual(2);
      const rows = await s.t.database.db.selectFrom('orders').selectAll().where('id', 'in', [paidOrder.id, unpaidOrder.id]).execute();
      expect(rows.map((r) => [r.input, r.input_digest, r.report_id])).toEqual([['', '', null], ['', '', null]]);
      await expectExpired();
      expect((await purgeExpired(s.t.database, s.t.clock.now())).orders).toBe(0);
      // A system clock stepped back to within the period does not reopen a purged order.
      s.t.clock.set(new Date(start.getTime() + 60_000));
      await expectExpired();
    } finally {
      s.t.clock.set(start);
    }
    await charged(1_000n);
  });
});

describe('an order paid late in its recovery period', () => {
  it('is restorable for a whole period from its payment, not only until it would have expired unpaid', async () => {
    const payer = addressOf(0);
    const charged = await ledger(payer);
    const start = s.t.clock.now();
    const ttlMs = s.t.config.recoveryTtlSeconds * 1000;
    try {
      const order = await createOrder('/api/quick-check', {});
      // Paid the day before the order would have expired.
      s.t.clock.advance(ttlMs - 86_400_000);
      const paidAt = s.t.clock.now();
      const { fetch: pay } = recordingPayingFetch(s, 0);
      const ok = await pay(`${s.url}/api/quick-check`, { headers: { 'Report-Id': order.id, 'Recovery-Key': order.key } });
      expect(ok.status).toBe(200);
      await charged(1_000n);

      // Past the order's first expiry, the report is still restored...
      s.t.clock.set(new Date(start.getTime() + ttlMs + 60_000));
      expect((await postJson('/api/orders/recover', { id: order.id, key: order.key })).status).toBe(200);
      // ... until a whole period after its payment.
      s.t.clock.set(new Date(paidAt.getTime() + ttlMs - 1));
      expect((await postJson('/api/orders/recover', { id: order.id, key: order.key })).status).toBe(200);
      s.t.clock.set(new Date(paidAt.getTime() + ttlMs));
      expectProblem(await asInjected(await postJson('/api/orders/recover', { id: order.id, key: order.key })), 410, 'recovery_expired');
    } finally {
      s.t.clock.set(start);
    }
    await charged(1_000n);
  });
});

describe('an order purged while it is being paid', () => {
  it('is not bound to the report (no renewed tombstone without its input): 410, which rolls the paid request back unsettled', async () => {
    const store = new OrderStore(s.t.database, s.t.config.recoveryTtlSeconds);
    const now = s.t.clock.now();
    const { row } = await store.create('/api/quick-check', {}, 'sha256:00', now);
    // The paid request read the order open; its period ends and the purge runs before the bind.
    const expiry = new Date(row.expires_at);
    expect(await purgeExpired(s.t.database, expiry)).toMatchObject({ orders: 1 });
    await expect(store.bind(row, 'rpt_00000000000000000000000000000000', new Date(expiry.getTime() - 1))).rejects.toMatchObject({ code: 'recovery_expired' });
    const after = await s.t.database.db.selectFrom('orders').selectAll().where('id', '=', row.id).executeTakeFirstOrThrow();
    expect([after.input_digest, after.report_id, after.expires_at]).toEqual(['', null, row.expires_at]);
  });
});

describe('CORS for browser clients', () => {
  it.each([
    ['GET', '/api/quick-check'],
    ['POST', '/api/verify-payment'],
    ['POST', '/api/orders/recover'],
  ])('a preflight for %s %s allows PAYMENT-SIGNATURE, Report-Id and Recovery-Key', async (method, path) => {
    const res = await fetch(`${s.url}${path}`, {
      method: 'OPTIONS',
      headers: {
        Origin: 'https://app.example',
        'Access-Control-Request-Method': method,
        'Access-Control-Request-Headers': 'payment-signature,report-id,recovery-key,content-type',
      },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(res.headers.get('access-control-allow-methods')?.toUpperCase()).toContain(method);
    const allowed = (res.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/\s*,\s*/);
    expect(allowed).toEqual(expect.arrayContaining(['payment-signature', 'report-id', 'recovery-key', 'content-type']));
  });

  it('exposes PAYMENT-REQUIRED on the challenge and PAYMENT-RESPONSE on the paid answer', async () => {
    const origin = { Origin: 'https://app.example' };
    const challenge = await fetch(`${s.url}/api/quick-check`, { headers: origin });
    expect(challenge.status).toBe(402);
    const exposed = (r: Response) => (r.headers.get('access-control-expose-headers') ?? '').toLowerCase().split(/\s*,\s*/);
    expect(challenge.headers.get('access-control-allow-origin')).toBe('https://app.example');
    expect(exposed(challenge)).toEqual(expect.arrayContaining(['payment-required', 'payment-response']));

    const paid = await recordingPayingFetch(s, 4).fetch(`${s.url}/api/quick-check`, { headers: origin });
    expect(paid.status).toBe(200);
    expect(paid.headers.get('payment-response')).toBeTruthy();
    expect(exposed(paid)).toEqual(expect.arrayContaining(['payment-required', 'payment-response']));
  });
});

describe('a 402 challenge', () => {
  it('never charges, however often it is asked for', async () => {
    const payer = addressOf(6);
    const charged = await ledger(payer);
    const calls0 = { ...s.devnet.facilitator.calls };
    const reports0 = await s.t.database.db.selectFrom('paid_reports').select('id').execute();
    for (let i = 0; i < 3; i++) {
      const quick = await fetch(`${s.url}/api/quick-check`);
      expect(quick.status).toBe(402);
      expect(quick.headers.get('payment-required')).toBeTruthy();
      const proof = await postJson('/api/verify-payment', proofInput());
      expect(proof.status).toBe(402);
      expect(proof.headers.get('payment-required')).toBeTruthy();
    }
    // No facilitator call, no stored report, no balance moved.
    expect(s.devnet.facilitator.calls.verify).toBe(calls0.verify);
    expect(s.devnet.facilitator.calls.settle).toBe(calls0.settle);
    expect(await s.t.database.db.selectFrom('paid_reports').select('id').execute()).toEqual(reports0);
    await charged(0n);
  });
});
