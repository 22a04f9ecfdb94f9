// While the request that stored a paid report is settling it, a replay of the same payment leaves
// it be (202 "settlement in progress") instead of starting a second settle of the authorization.
// That guard lasts 2 × facilitatorTimeoutMs + 30 s (a settle is up to two facilitator calls: the
// SDK sends one more after settlement_pending) from when the report was stored, i.e. when its
// settle starts: a slow verify or report before that must not use the window up, or a replay
// arriving during the settle would race it.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { eventually, signPayment, startHttpProxy, startPaidStack, type PaidStack } from '../helpers/paid.js';

const TIMEOUT_MS = 10_000;

let base: PaidStack;
let s: PaidStack;
let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
let verifyHold: Promise<void> | null = null;
let settleHold: Promise<void> | null = null;
const seen = { verify: 0, settle: 0 };

beforeAll(async () => {
  base = await startPaidStack();
  proxy = await startHttpProxy(base.devnet.facilitatorUrl, async (req, forward) => {
    if (req.url === '/verify') {
      seen.verify++;
      if (verifyHold) await verifyHold;
    }
    if (req.url === '/settle') {
      // Only the first settle is held (the original request's); any other goes straight through.
      if (++seen.settle === 1 && settleHold) await settleHold;
    }
    return forward();
  });
  s = await startPaidStack({ devnet: base.devnet, database: base.t.database, config: { facilitatorUrl: proxy.url, facilitatorTimeoutMs: TIMEOUT_MS } });
});
afterAll(async () => {
  await s?.close();
  await proxy?.close();
  await base?.close();
});

it('a replay during the settle of a slowly verified report does not start a second settle', async () => {
  const url = `${s.url}/api/quick-check`;
  const sig = await signPayment(s, 6, url);
  const payee0 = await s.balanceOf(s.payTo);

  let releaseVerify!: () => void;
  let releaseSettle!: () => void;
  verifyHold = new Promise((r) => (releaseVerify = r));
  settleHold = new Promise((r) => (releaseSettle = r));
  const original = fetch(url, { headers: { 'payment-signature': sig } });
  try {
    // The request is in verify, which (like a slow report) takes longer than the whole window.
    await eventually(async () => seen.verify === 1, 'the verify to reach the facilitator');
    s.t.clock.advance(2 * TIMEOUT_MS + 31_000);
    releaseVerify();
    // The report is stored and its settle has started (and is held there).
    await eventually(async () => seen.settle === 1, 'the settle to reach the facilitator');

    const replay = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(replay.status).toBe(202);
    expect(await replay.json()).toMatchObject({ status: 'pending', reason: 'settlement in progress' });
    expect(seen.settle).toBe(1);
    // Past one facilitator call and the margin, the settle may still be in its second call.
    s.t.clock.advance(TIMEOUT_MS + 31_000);
    const later = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(later.status).toBe(202);
    expect(await later.json()).toMatchObject({ status: 'pending', reason: 'settlement in progress' });
    expect(seen.settle).toBe(1);
  } finally {
    releaseVerify();
    releaseSettle();
  }
  const res = await original;
  expect(res.status).toBe(200);
  expect(seen.settle).toBe(1);
  expect(await s.balanceOf(s.payTo)).toBe(payee0 + 1000n);
});
