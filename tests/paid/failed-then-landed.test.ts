// An order whose payment the facilitator refused before sending (so the report row is failed and
// the order may be paid again), while that same authorization did land on chain after all: the
// payer submitted it, say, and the RPC read at the refusal was a block behind. The next payment
// for the order must not be taken: the chain is read first, and the report it already paid for is
// delivered.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { paidRowOf, postJson, recordingPayingFetch, startHttpProxy, startPaidStack, type PaidStack } from '../helpers/paid.js';

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

it('a refused payment that lands later: paying the order again delivers its report, and the second payment is not taken', async () => {
  const payer = s.devnet.accounts[7]!.address;
  const before = await s.balanceOf(payer);
  const created = await postJson(`${h.url}/api/orders`, { path: '/api/quick-check', input: {} });
  const order = { 'report-id': '', 'recovery-key': '' };
  ({ id: order['report-id'], key: order['recovery-key'] } = await created.json());

  // The settle is refused as a pre-broadcast failure, but the transfer is kept and sent later.
  let land!: () => Promise<unknown>;
  proxy.setRule(async (req, forward) => {
    if (req.url !== '/settle') return forward();
    land = forward;
    return { status: 200, body: JSON.stringify({ success: false, errorReason: 'invalid_exact_evm_transaction_simulation_failed', transaction: '', network: 'eip155:8453' }) };
  });
  const first = recordingPayingFetch(h, 7);
  const refused = await first.fetch(`${h.url}/api/quick-check`, { headers: order });
  proxy.setRule(null);
  expect(refused.status).toBe(402);
  expect((await paidRowOf(s, first.signatures[0]!))?.status).toBe('failed');
  expect(await s.balanceOf(payer)).toBe(before);

  await land(); // the first authorization lands on chain
  expect(await s.balanceOf(payer)).toBe(before - 1000n);

  // The client pays the order again: it gets the report the first payment bought, charged once.
  const second = recordingPayingFetch(h, 7);
  const res = await second.fetch(`${h.url}/api/quick-check`, { headers: order });
  expect(res.status).toBe(200);
  const body = await res.json();
  expect(body.receipt.subject.payer.toLowerCase()).toBe(payer.toLowerCase());
  expect(second.signatures).toEqual([]);
  expect(await s.balanceOf(payer)).toBe(before - 1000n);
  expect((await paidRowOf(s, first.signatures[0]!))?.status).toBe('settled');
});
