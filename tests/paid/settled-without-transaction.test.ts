// A facilitator's settle that answers success without a transaction hash (the SDK's schema takes
// any string). Taken as settled, the receipt named no transaction and the row was recorded as
// settled with an empty one, which every later replay and recovery read as "not recorded yet":
// 202 for ever, the paid report never to be had again. It is uncertain instead: 202 with the
// order, and the report is released once the transfer is seen on chain.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { paidRowOf, recordingPayingFetch, recoverOrder, startHttpProxy, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
let h: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
  proxy = await startHttpProxy(s.devnet.facilitatorUrl);
  h = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
});
afterAll(async () => {
  await h?.close();
  await proxy?.close();
  await s?.close();
});

it('a settle answered "success" without its transaction: 202, then the report and a receipt naming the real transaction, charged once', async () => {
  const payer = s.devnet.accounts[3]!.address;
  const before = await s.balanceOf(payer);
  let settled = '';
  proxy.setRule(async (req, forward) => {
    if (req.url !== '/settle') return forward();
    const real = await forward();
    const body = JSON.parse(real.body);
    settled = body.transaction;
    return { ...real, body: JSON.stringify({ ...body, transaction: '' }) };
  });
  const { fetch: pay, signatures } = recordingPayingFetch(h, 3);
  const first = await pay(`${h.url}/api/quick-check`);
  proxy.setRule(null);
  expect(before - (await s.balanceOf(payer))).toBe(1000n);
  expect(first.status).toBe(202);
  const pending = await first.json();
  expect(pending).toMatchObject({ status: 'pending', orderId: expect.any(String), recoveryKey: expect.any(String) });
  expect((await paidRowOf(s, signatures[0]!))?.status).not.toBe('settled');

  const restored = await recoverOrder(h, pending);
  expect(restored.status).toBe(200);
  expect((restored.body.receipt as { subject: { settlementTransaction: string } }).subject.settlementTransaction).toBe(settled);
  // The buyer's retry with the same signature gets the same report and receipt.
  const replay = await fetch(`${h.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
  expect(replay.status).toBe(200);
  const { receipt, ...report } = await replay.json();
  expect({ report, receipt }).toEqual(restored.body);
  expect(before - (await s.balanceOf(payer))).toBe(1000n);
});
