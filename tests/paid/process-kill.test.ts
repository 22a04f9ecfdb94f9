// The service as `npm start` runs it (src/main.ts), in its own process, on the SQLite file of an
// instance in this process: two processes on one database file. The child is killed (SIGKILL) in
// the middle of a payment, once after the chain took it and once before its settle was sent; the
// same PAYMENT-SIGNATURE sent again to the other process delivers the report, settled once. And
// copies of one payment sent at once to both processes settle once.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/platform/clock.js';
import { testDialect } from '../helpers/db.js';
import { startServiceProcess, type ServiceProcess } from '../helpers/service-process.js';
import { paidRowOf, signPayment, startHttpProxy, startPaidStack, type PaidStack, type ProxyRule } from '../helpers/paid.js';

const QUICK_PRICE = 1_000n;
const FACILITATOR_TIMEOUT_MS = 3000;
/** settlement.ts settleLeaseMs: how long after a settle was sent no other one is. */
const LEASE_MS = 2 * FACILITATOR_TIMEOUT_MS + 30_000;

describe.skipIf(testDialect !== 'sqlite')('two processes on one SQLite file', () => {
  let s: PaidStack; // this process
  let clock: ManualClock;
  let proxy: Awaited<ReturnType<typeof startHttpProxy>>; // the child's facilitator
  let child: ServiceProcess | undefined;

  beforeAll(async () => {
    clock = new ManualClock(new Date());
    s = await startPaidStack({ clock, config: { facilitatorTimeoutMs: FACILITATOR_TIMEOUT_MS } });
    proxy = await startHttpProxy(s.devnet.facilitatorUrl);
  });
  afterEach(async () => {
    proxy.setRule(null);
    if (child && child.child.exitCode === null && child.child.signalCode === null) {
      child.child.kill('SIGKILL');
      await child.exited;
    }
    child = undefined;
  });
  afterAll(async () => {
    await proxy?.close();
    await s?.close();
  });

  async function startChild() {
    child = await startServiceProcess({
      DATABASE_URL: s.t.database.url,
      BASE_RPC_URLS: s.devnet.rpcUrl,
      FACILITATOR_URL: proxy.url,
      PAY_TO: s.payTo,
      // The same resource URL as this process's challenges (testConfig's).
      PUBLIC_BASE_URL: s.t.config.publicBaseUrl,
      FACILITATOR_TIMEOUT_MS: String(FACILITATOR_TIMEOUT_MS),
      RATE_LIMITS: 'off',
      LOG_LEVEL: 'silent',
    });
    return child;
  }

  /** Kills the child at its settle call: after the real facilitator settled it, or before it is sent. */
  const killAtSettle = (c: ServiceProcess, after: boolean): ProxyRule => async (req, forward) => {
    if (req.url !== '/settle') return forward();
    if (after) await forward();
    c.child.kill('SIGKILL');
    await c.exited;
    return 'drop';
  };

  async function ledger(payer: number) {
    const from = s.devnet.accounts[payer]!.address;
    const [payee0, payer0, settles0] = [await s.balanceOf(s.payTo), await s.balanceOf(from), s.devnet.facilitator.calls.settle];
    return async (charged: bigint, settles: number) => {
      expect(await s.balanceOf(s.payTo)).toBe(payee0 + charged);
      expect(await s.balanceOf(from)).toBe(payer0 - charged);
      expect(s.devnet.facilitator.calls.settle - settles0).toBe(settles);
    };
  }

  /** A quick check paid by `payer` at a child killed at its settle (after the chain took it, or before it was sent). */
  async function killedMidPayment(payer: number, afterChain: boolean) {
    const c = await startChild();
    const sig = await signPayment(s, payer, `${c.url}/api/quick-check`);
    const charged = await ledger(payer);
    proxy.setRule(killAtSettle(c, afterChain));
    await expect(fetch(`${c.url}/api/quick-check`, { headers: { 'payment-signature': sig } })).rejects.toThrow();
    await c.exited;
    expect(c.child.signalCode).toBe('SIGKILL');
    return { sig, charged };
  }

  it('killed after the chain took the payment: the same signature at the other process delivers the report, no second settle', async () => {
    const { sig, charged } = await killedMidPayment(1, true);
    await charged(QUICK_PRICE, 1);
    expect((await paidRowOf(s, sig))?.status).toBe('stored'); // the child never recorded the settlement

    const res = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': sig } });
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body).toMatchObject({ status: 'PASS', receipt: { subject: { path: '/api/quick-check', price: '0.001' } } });
    expect((await paidRowOf(s, sig))?.status).toBe('settled');
    await charged(QUICK_PRICE, 1);
  });

  it('killed after storing the report, before its settle was sent: pending while the lease lasts, then settled once and delivered', async () => {
    const { sig, charged } = await killedMidPayment(2, false);
    await charged(0n, 0);
    expect((await paidRowOf(s, sig))?.status).toBe('stored'); // durable before the settle was asked for

    // The settle the child may have sent could still be running: no second one yet, and no 402.
    const early = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': sig } });
    expect(early.status).toBe(202);
    expect(await early.json()).toMatchObject({ status: 'pending' });
    await charged(0n, 0);

    clock.set(new Date(Date.now() + LEASE_MS + 1000));
    const res = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': sig } });
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body).toMatchObject({ status: 'PASS' });
    await charged(QUICK_PRICE, 1);
  });

  it('copies of one payment sent at once to both processes settle once; every copy gets the report or a pending answer', async () => {
    const c = await startChild();
    const sig = await signPayment(s, 3, `${c.url}/api/quick-check`);
    const charged = await ledger(3);
    const answers = await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const res = await fetch(`${i % 2 ? c.url : s.url}/api/quick-check`, { headers: { 'payment-signature': sig } });
        return { status: res.status, body: await res.json() };
      }),
    );
    for (const a of answers) expect([200, 202], JSON.stringify(a)).toContain(a.status);
    expect(answers.map((a) => a.status)).toContain(200);
    await charged(QUICK_PRICE, 1);
    const replay = await fetch(`${c.url}/api/quick-check`, { headers: { 'payment-signature': sig } });
    expect(replay.status).toBe(200);
    const stored = await replay.json();
    for (const a of answers.filter((x) => x.status === 200)) expect(a.body).toEqual(stored);
    await charged(QUICK_PRICE, 1);
  });
});
