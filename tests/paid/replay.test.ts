// One payment authorization buys one report: replays with the same input get the stored report
// (same receipt) and never a second charge; the same authorization with another input is a 409;
// concurrent copies of one authorization settle once. The chain's balances are the judge.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { randomBytes } from 'node:crypto';
import { expectProblem } from '../helpers/problems.js';
import { asInjected, eventually, recordingPayingFetch, signPayment, startHttpProxy, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
});
afterAll(async () => {
  await s?.close();
});

const PROOF_PRICE = 10_000n; // 0.01 USDC
const QUICK_PRICE = 1_000n; // 0.001 USDC
const addressOf = (i: number) => s.devnet.accounts[i]!.address;
const proofBody = (expectedAmount = '0.01') => ({ chain: 'base', txHash: `0x${randomBytes(32).toString('hex')}`, expectedTo: s.payTo, expectedAmount });
const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

describe('replaying one payment authorization', () => {
  it('returns the same stored report and receipt for the same input, charging once; 409 for another input', async () => {
    const payer = addressOf(1);
    const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];

    const body = proofBody();
    const first = await pay(`${s.url}/api/verify-payment`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(first.status).toBe(200);
    const report = await first.json();
    const settlement = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    expect(settlement.success).toBe(true);
    expect(signatures).toHaveLength(1);
    const sig = signatures[0]!;
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + PROOF_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - PROOF_PRICE);
    const settleCalls = s.devnet.facilitator.calls.settle;

    // The same signature and the same input, three times: the stored report, its one receipt.
    for (let i = 0; i < 3; i++) {
      const again = await post('/api/verify-payment', body, { 'payment-signature': sig });
      expect(again.status).toBe(200);
      expect(await again.json()).toEqual(report);
      expect(decodePaymentResponseHeader(again.headers.get('payment-response')!)).toMatchObject({ success: true, transaction: settlement.transaction });
    }
    expect(s.devnet.facilitator.calls.settle).toBe(settleCalls);

    // The same signature with another input: 409, nothing charged.
    const conflict = await post('/api/verify-payment', { ...body, expectedAmount: '0.02' }, { 'payment-signature': sig });
    expectProblem(await asInjected(conflict), 409, 'payment_conflict');
    // ... and on another paid report (its price differs; still the same authorization).
    const elsewhere = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': sig } });
    expectProblem(await asInjected(elsewhere), 409, 'payment_conflict');

    // ... and with its nonce (or payer) written in capitals: the same authorization, known as such
    // before the facilitator is asked (it is one authorization on chain, whatever the hex case).
    const payment = JSON.parse(Buffer.from(sig, 'base64').toString('utf8')) as { payload: { authorization: { from: string; nonce: string } } };
    const auth = payment.payload.authorization;
    const verifies = s.devnet.facilitator.calls.verify;
    for (const changed of [{ nonce: `0x${auth.nonce.slice(2).toUpperCase()}` }, { from: `0x${auth.from.slice(2).toUpperCase()}` }]) {
      const recased = Buffer.from(JSON.stringify({ ...payment, payload: { ...payment.payload, authorization: { ...auth, ...changed } } })).toString('base64');
      const res = await post('/api/verify-payment', body, { 'payment-signature': recased });
      const problem = expectProblem(await asInjected(res), 409, 'payment_conflict');
      expect(problem.detail).toMatch(/reuses this authorization nonce/);
    }
    expect(s.devnet.facilitator.calls.verify).toBe(verifies);

    expect(await s.balanceOf(s.payTo)).toBe(payee0 + PROOF_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - PROOF_PRICE);
    expect(s.devnet.facilitator.calls.settle).toBe(settleCalls);
  });

  it('settles ten concurrent copies of one authorization exactly once', async () => {
    const payer = addressOf(2);
    const url = `${s.url}/api/quick-check`;
    const sig = await signPayment(s, 2, url);
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
    const settle0 = s.devnet.facilitator.calls.settle;

    const answers = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const res = await fetch(url, { headers: { 'payment-signature': sig } });
        return { status: res.status, body: await res.json(), retryAfter: res.headers.get('retry-after') };
      }),
    );
    const statuses = answers.map((a) => a.status);
    expect(statuses.every((st) => st === 200 || st === 202), JSON.stringify(statuses)).toBe(true);
    expect(statuses).toContain(200);
    for (const a of answers.filter((x) => x.status === 202)) {
      expect(a.body).toMatchObject({ status: 'pending', orderId: expect.stringMatching(/^ord_[0-9a-f]{32}$/) });
      expect(a.body.recoveryKey).toBeUndefined(); // only the request that stored the report may hold the key
      expect(Number(a.retryAfter)).toBeGreaterThan(0);
    }

    // One settlement: the facilitator was asked once, the chain moved once.
    expect(s.devnet.facilitator.calls.settle - settle0).toBe(1);
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - QUICK_PRICE);

    // Every delivered copy is the one stored report with its one receipt; a replay now gets it too.
    const replay = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(replay.status).toBe(200);
    const stored = await replay.json();
    for (const a of answers.filter((x) => x.status === 200)) expect(a.body).toEqual(stored);
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    expect(s.devnet.facilitator.calls.settle - settle0).toBe(1);
  });

  it('settles concurrent copies of a payment-proof authorization once (request bodies included)', async () => {
    const payer = addressOf(3);
    const body = proofBody('1');
    const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
    const sig = await signPayment(s, 3, `${s.url}/api/verify-payment`, init);
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];

    // Five with the paid input, five with another input: the others must never buy anything.
    const answers = await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const res = await post('/api/verify-payment', i % 2 ? { ...body, expectedAmount: '2' } : body, { 'payment-signature': sig });
        return { i, status: res.status, body: await res.json() };
      }),
    );
    // Either input may have stored its report first; from then on the other one is a conflict.
    for (const a of answers) expect([200, 202, 409], JSON.stringify(a)).toContain(a.status);
    const winners = new Set(answers.filter((a) => a.status !== 409).map((a) => a.i % 2));
    expect(winners.size).toBe(1);
    expect(answers.filter((a) => a.status === 409).every((a) => a.body.code === 'payment_conflict')).toBe(true);
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + PROOF_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - PROOF_PRICE);
  });
});

/**
 * A client's retry of one signature (after its own timeout, say) whose verify reaches the
 * facilitator only after the original request has stored and settled the authorization: the
 * facilitator then refuses it as used. The retry must get the report that payment bought, never a
 * 402 telling the payer that nothing was charged and to sign again (a second charge).
 */
describe('a retry verified after the original settled', () => {
  let held: Stack;
  type Stack = { stack: PaidStack; proxyUrl: string; verifies: number; hold: Array<Promise<void>>; close(): Promise<void> };
  beforeAll(async () => {
    const state = { verifies: 0, hold: [] as Array<Promise<void>> };
    const proxy = await startHttpProxy(s.devnet.facilitatorUrl, async (req, forward) => {
      if (req.url === '/verify') await state.hold[state.verifies++];
      return forward();
    });
    const stack = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
    held = Object.assign(state, {
      stack,
      proxyUrl: proxy.url,
      async close() {
        await stack.close();
        await proxy.close();
      },
    });
  });
  afterAll(async () => {
    await held?.close();
  });

  it.each([
    ['with the signature alone', false],
    ['with the recovery order as well', true],
  ])('%s: gets the stored report, charged once', async (_, withOrder) => {
    const { stack } = held;
    const account = withOrder ? 6 : 4; // not 5: it is payTo
    const payer = addressOf(account);
    const url = `${stack.url}/api/quick-check`;
    const headers: Record<string, string> = { 'payment-signature': await signPayment(stack, account, url) };
    if (withOrder) {
      const order = await (await post('/api/orders', { path: '/api/quick-check', input: {} })).json();
      Object.assign(headers, { 'report-id': order.id, 'recovery-key': order.key });
    }
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
    let releaseOriginal!: () => void;
    let releaseRetry!: () => void;
    held.verifies = 0;
    held.hold = [new Promise((r) => (releaseOriginal = r)), new Promise((r) => (releaseRetry = r))];

    const original = fetch(url, { headers });
    await eventually(async () => held.verifies >= 1, 'the original at the facilitator');
    const retry = fetch(url, { headers });
    await eventually(async () => held.verifies >= 2, 'the retry at the facilitator');
    releaseOriginal();
    const first = await original;
    expect(first.status).toBe(200);
    const report = await first.json();
    releaseRetry();
    const second = await retry;
    const body = await second.json();
    expect(second.status, JSON.stringify(body)).toBe(200);
    expect(body).toEqual(report);
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - QUICK_PRICE);
  });

  it('a retry whose own verify gets no answer in time still gets the report the original bought', async () => {
    // Another instance on the same database and facilitator proxy, with a short facilitator timeout.
    const impatient = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: held.proxyUrl, facilitatorTimeoutMs: 3000 } });
    let releaseRetry!: () => void;
    try {
      const payer = addressOf(7);
      const url = `${impatient.url}/api/quick-check`;
      const sig = await signPayment(impatient, 7, url);
      const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
      let releaseOriginal!: () => void;
      held.verifies = 0;
      held.hold = [new Promise((r) => (releaseOriginal = r)), new Promise((r) => (releaseRetry = r))];

      const original = fetch(url, { headers: { 'payment-signature': sig } });
      await eventually(async () => held.verifies >= 1, 'the original at the facilitator');
      const retry = fetch(url, { headers: { 'payment-signature': sig } });
      await eventually(async () => held.verifies >= 2, 'the retry at the facilitator');
      releaseOriginal();
      const first = await original;
      expect(first.status).toBe(200);
      const report = await first.json();
      // The retry's verify is held past the timeout: the facilitator never answers it.
      const second = await retry;
      const body = await second.json();
      expect(second.status, JSON.stringify(body)).toBe(200);
      expect(body).toEqual(report);
      expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
      expect(await s.balanceOf(payer)).toBe(payer0 - QUICK_PRICE);
    } finally {
      releaseRetry?.();
      await impatient.close();
    }
  });
});
