// An order whose payment the facilitator refused before sending (so the report row is failed and
// the order may be paid again), while that same authorization did land on chain after all: the
// payer submitted it, say, and the RPC read at the refusal was a block behind. The next payment
// for the order must not be taken: the chain is read first, and the report it already paid for is
// delivered.
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { SettlementService } from '../../src/features/reports/settlement.js';
import { expectProblem } from '../helpers/problems.js';
import { asInjected, paidRowOf, postJson, recordingPayingFetch, recoverOrder, startHttpProxy, startPaidStack, type PaidStack } from '../helpers/paid.js';
import { startRpcProxy } from '../helpers/rpc-proxy.js';

let s: PaidStack;
let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
let h: PaidStack;
let rpc: Awaited<ReturnType<typeof startRpcProxy>>;
beforeAll(async () => {
  s = await startPaidStack();
  proxy = await startHttpProxy(s.devnet.facilitatorUrl);
  rpc = await startRpcProxy(s.devnet.rpcUrl);
  h = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: proxy.url, rpcUrls: [rpc.url] } });
});
afterAll(async () => {
  await h?.close();
  await rpc?.close();
  await proxy?.close();
  await s?.close();
});

/** An order for the quick check whose first payment the facilitator refused before sending; `land` sends that payment after all. */
async function refusedOrder(payer: number) {
  const created = await postJson(`${h.url}/api/orders`, { path: '/api/quick-check', input: {} });
  const { id, key } = await created.json();
  const order = { 'report-id': id as string, 'recovery-key': key as string };
  let land!: () => Promise<unknown>;
  proxy.setRule(async (req, forward) => {
    if (req.url !== '/settle') return forward();
    land = forward;
    return { status: 200, body: JSON.stringify({ success: false, errorReason: 'invalid_exact_evm_transaction_simulation_failed', transaction: '', network: 'eip155:8453' }) };
  });
  const first = recordingPayingFetch(h, payer);
  const refused = await first.fetch(`${h.url}/api/quick-check`, { headers: order });
  proxy.setRule(null);
  expect(refused.status).toBe(402);
  expect((await paidRowOf(s, first.signatures[0]!))?.status).toBe('failed');
  return { order, signature: first.signatures[0]!, land: () => land() };
}

it('while the chain cannot be read, a failed order is not paid again (502, nothing charged); a request without payment still gets its 402 without reading it', async () => {
  const payer = s.devnet.accounts[8]!.address;
  const before = await s.balanceOf(payer);
  const { order } = await refusedOrder(8);
  rpc.setRule(async () => ({ status: 503, body: 'down' }));
  try {
    const reads = rpc.log.length;
    const probe = await fetch(`${h.url}/api/quick-check`, { headers: order });
    expect(probe.status).toBe(402);
    expect(rpc.log.length).toBe(reads);
    const again = recordingPayingFetch(h, 8);
    expectProblem(await asInjected(await again.fetch(`${h.url}/api/quick-check`, { headers: order })), 502, 'upstream_unavailable');
    expect(again.signatures).toHaveLength(1);
  } finally {
    rpc.setRule(null);
  }
  expect(await s.balanceOf(payer)).toBe(before);
  // The chain readable again and the first payment nowhere on it: the order is paid, once.
  const paid = await recordingPayingFetch(h, 8).fetch(`${h.url}/api/quick-check`, { headers: order });
  expect(paid.status).toBe(200);
  expect(await s.balanceOf(payer)).toBe(before - 1000n);
});

it('a refused payment is not kept signed: what the database holds cannot charge the payer, nor can a settled one', async () => {
  const payer = s.devnet.accounts[5]!.address;
  const before = await s.balanceOf(payer);
  const { signature } = await refusedOrder(5);
  // Someone who reads the database (a backup, an operator) submits the stored authorization while it is still valid.
  const stored = JSON.parse((await paidRowOf(s, signature))!.payment);
  expect(stored.payload.payload.authorization.from.toLowerCase()).toBe(payer.toLowerCase());
  const settle = await postJson(`${s.devnet.facilitatorUrl}/settle`, { x402Version: 2, paymentPayload: stored.payload, paymentRequirements: stored.requirements });
  const answer = await settle.json().catch(() => ({}));
  expect(answer.success).not.toBe(true);
  expect(await s.balanceOf(payer)).toBe(before);

  const paid = recordingPayingFetch(h, 5);
  expect((await paid.fetch(`${h.url}/api/quick-check`)).status).toBe(200);
  const settled = JSON.parse((await paidRowOf(s, paid.signatures[0]!))!.payment);
  expect(settled.payload.payload).not.toHaveProperty('signature');
  expect(settled.payload.payload.authorization.nonce).toMatch(/^0x[0-9a-f]{64}$/);
});

it('a refused payment that lands later: paying the order again delivers its report, and the second payment is not taken', async () => {
  const payer = s.devnet.accounts[7]!.address;
  const before = await s.balanceOf(payer);
  const { order, signature, land } = await refusedOrder(7);
  expect(await s.balanceOf(payer)).toBe(before);

  await land(); // the first authorization lands on chain
  expect(await s.balanceOf(payer)).toBe(before - 1000n);

  // The client pays the order again: it gets the report the first payment bought, charged once.
  const second = recordingPayingFetch(h, 6);
  const res = await second.fetch(`${h.url}/api/quick-check`, { headers: order });
  expect(res.status).toBe(200);
  const body = await res.json();
  expect(body.receipt.subject.payer.toLowerCase()).toBe(payer.toLowerCase());
  // It signed a second payment (the 402 came first), which was never taken.
  expect(second.signatures).toHaveLength(1);
  expect(await s.balanceOf(payer)).toBe(before - 1000n);
  expect((await paidRowOf(s, signature))?.status).toBe('settled');
});

it('a refused payment that lands later: the same PAYMENT-SIGNATURE sent again delivers its report, never "nothing was charged"', async () => {
  const payer = s.devnet.accounts[3]!.address;
  const before = await s.balanceOf(payer);
  const { signature, land } = await refusedOrder(3);
  await land(); // the refused authorization lands on chain after all
  expect(await s.balanceOf(payer)).toBe(before - 1000n);
  // The stored row says failed; the chain, read first, says paid: the report is delivered.
  const res = await fetch(`${h.url}/api/quick-check`, { headers: { 'payment-signature': signature } });
  expect(res.status, await res.clone().text()).toBe(200);
  expect((await res.json()).receipt.subject.payer.toLowerCase()).toBe(payer.toLowerCase());
  expect(await s.balanceOf(payer)).toBe(before - 1000n);
  expect((await paidRowOf(s, signature))?.status).toBe('settled');
});

it('an earlier payment recorded as landed while the new one was under way: the new one is not bound nor settled (409, not charged)', async () => {
  const payer = s.devnet.accounts[9]!.address;
  const { order, signature } = await refusedOrder(9);
  const before = await s.balanceOf(payer);
  // The chain read before the new payment saw nothing; a recovery then found the earlier payment
  // and recorded it (as finalize does) while the new one was at the facilitator.
  const earlier = (await paidRowOf(s, signature))!;
  const spy = vi.spyOn(SettlementService.prototype, 'landedAfterRefusal').mockImplementation(async () => {
    await s.t.database.db.updateTable('paid_reports').set({ status: 'settled', settle_tx: `0x${'cd'.repeat(32)}` }).where('id', '=', earlier.id).execute();
    return undefined;
  });
  try {
    const res = await recordingPayingFetch(h, 9).fetch(`${h.url}/api/quick-check`, { headers: order });
    expectProblem(await asInjected(res), 409, 'payment_conflict');
  } finally {
    spy.mockRestore();
  }
  expect(await s.balanceOf(payer)).toBe(before);
});

it('a refusal "before sending" while the chain cannot be read is pending, never "nothing was charged": the payment may have landed', async () => {
  const payer = s.devnet.accounts[6]!.address;
  const before = await s.balanceOf(payer);
  let land!: () => Promise<unknown>;
  proxy.setRule(async (req, forward) => {
    if (req.url !== '/settle') return forward();
    land = forward;
    rpc.setRule(async () => ({ status: 503, body: 'down' }));
    return { status: 200, body: JSON.stringify({ success: false, errorReason: 'invalid_exact_evm_transaction_simulation_failed', transaction: '', network: 'eip155:8453' }) };
  });
  const { fetch: pay, signatures } = recordingPayingFetch(h, 6);
  let res: Response;
  try {
    res = await pay(`${h.url}/api/quick-check`);
  } finally {
    proxy.setRule(null);
    rpc.setRule(null);
  }
  expect(res.status).toBe(202);
  const pending = await res.json();
  expect(pending).toMatchObject({ status: 'pending', reason: expect.stringMatching(/chain could not be checked/) });
  expect((await paidRowOf(s, signatures[0]!))?.status).toBe('pending');
  // It had landed after all: the order restores the report, charged once.
  await land();
  const restored = await recoverOrder(h, pending);
  expect(restored.status).toBe(200);
  expect(await s.balanceOf(payer)).toBe(before - 1000n);
});
