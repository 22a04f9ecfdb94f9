// Durable storage is the precondition of every charge: without it no payment is requested (503)
// and none is settled; and a process that dies after the chain took the payment but before it
// recorded so leaves a report that a new instance restores through recovery, never charging twice.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { createPublicClient, http, parseAbiItem, type Hex } from 'viem';
import { baseDevnetChain, USDC_ADDRESS } from '../../src/devnet/index.js';
import { expectProblem } from '../helpers/problems.js';
import {
  asInjected,
  dbFaults,
  faultyDatabase,
  postJson,
  recordingPayingFetch,
  startPaidStack,
  type FaultyDatabase,
  type PaidStack,
} from '../helpers/paid.js';

const QUICK_PRICE = 1_000n;

let s: PaidStack; // the healthy instance; its database is the one every instance shares
let faulty: FaultyDatabase;
let sick: PaidStack; // a second instance on the same database, seen through the fault plugin
beforeAll(async () => {
  s = await startPaidStack();
  faulty = faultyDatabase(s.t.database);
  sick = await startPaidStack({ devnet: s.devnet, database: faulty });
});
afterAll(async () => {
  await sick?.close();
  await s?.close();
});

const addressOf = (i: number) => s.devnet.accounts[i]!.address;
const rows = (table: 'paid_reports' | 'orders') =>
  s.t.database.db.selectFrom(table).select((eb) => eb.fn.countAll<number | bigint>().as('n')).executeTakeFirstOrThrow().then((r) => Number(r.n));
const reportOfPayer = (payer: string) =>
  s.t.database.db.selectFrom('paid_reports').selectAll().where('auth_id', 'like', `${payer.toLowerCase()}:%`).execute();

/** The USDC transfers from `from` to `to` the chain holds (the judge of "charged"). */
async function transfers(from: string, to: string): Promise<Hex[]> {
  const pub = createPublicClient({ chain: baseDevnetChain(s.devnet.rpcUrl), transport: http(s.devnet.rpcUrl) });
  const logs = await pub.getLogs({
    address: USDC_ADDRESS,
    event: parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)'),
    args: { from: from as Hex, to: to as Hex },
    fromBlock: 0n,
    toBlock: 'latest',
  });
  return logs.map((l) => l.transactionHash);
}

describe('storage unreachable', () => {
  it('answers 503 (never a 402 challenge) to a request without payment, and charges nothing through the official client', async () => {
    const payer = addressOf(1);
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
    faulty.fail(dbFaults.everything);
    try {
      const plain = await fetch(`${sick.url}/api/quick-check`);
      expectProblem(await asInjected(plain), 503, 'storage_unavailable');
      expect(plain.headers.get('payment-required')).toBeNull();

      const proof = await postJson(`${sick.url}/api/verify-payment`, { chain: 'base', txHash: `0x${'ab'.repeat(32)}`, expectedTo: s.payTo, expectedAmount: '1' });
      expectProblem(await asInjected(proof), 503, 'storage_unavailable');
      expect(proof.headers.get('payment-required')).toBeNull();

      const { fetch: pay, signatures } = recordingPayingFetch(sick, 1);
      const paid = await pay(`${sick.url}/api/quick-check`);
      expect(paid.status).toBe(503);
      expect(signatures).toHaveLength(0); // the client was never asked to pay

      // Recovery orders live in the same storage: they are 503 too, not a 500.
      const order = await postJson(`${sick.url}/api/orders`, { path: '/api/quick-check', input: {} });
      expectProblem(await asInjected(order), 503, 'storage_unavailable');
      const recover = await postJson(`${sick.url}/api/orders/recover`, { id: `ord_${'0'.repeat(32)}`, key: 'ork_x' });
      expectProblem(await asInjected(recover), 503, 'storage_unavailable');
    } finally {
      faulty.fail(null);
    }
    expect(faulty.refused).toBeGreaterThan(0);
    expect(await s.balanceOf(s.payTo)).toBe(payee0);
    expect(await s.balanceOf(payer)).toBe(payer0);
  });

  it('answers 503 and settles nothing when storing the paid report fails; the same authorization works once storage is back', async () => {
    const payer = addressOf(2);
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
    const [reports0, orders0] = [await rows('paid_reports'), await rows('orders')];
    const settle0 = s.devnet.facilitator.calls.settle;
    const { fetch: pay, signatures } = recordingPayingFetch(sick, 2);

    faulty.fail(dbFaults.insertInto('paid_reports'));
    let res: Response;
    try {
      res = await pay(`${sick.url}/api/quick-check`);
    } finally {
      faulty.fail(null);
    }
    expectProblem(await asInjected(res), 503, 'storage_unavailable');
    expect(res.headers.get('payment-response')).toBeNull();
    expect(signatures).toHaveLength(1); // it did pay (authorize) ...
    expect(s.devnet.facilitator.calls.settle).toBe(settle0); // ... but nothing was settled
    expect(await s.balanceOf(s.payTo)).toBe(payee0);
    expect(await s.balanceOf(payer)).toBe(payer0);
    // Nothing half-written: no report and no automatically created order.
    expect(await rows('paid_reports')).toBe(reports0);
    expect(await rows('orders')).toBe(orders0);

    // The authorization was never used, so retrying it (now storage is back) buys the report once.
    const retry = await fetch(`${sick.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
    expect(retry.status).toBe(200);
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - QUICK_PRICE);
  });

  it('never tells a payer whose payment was taken that nothing was charged: the 503 says retry, and the retry delivers', async () => {
    const payer = addressOf(6); // not 5: it is payTo
    const { fetch: pay, signatures } = recordingPayingFetch(s, 6);
    const paid = await pay(`${s.url}/api/quick-check`);
    expect(paid.status).toBe(200);
    const report = await paid.json();
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];

    // The client replays its signature (it lost the answer) to an instance whose storage fails.
    faulty.fail(dbFaults.everything);
    let replay: Response;
    try {
      replay = await fetch(`${sick.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
    } finally {
      faulty.fail(null);
    }
    const problem = expectProblem(await asInjected(replay), 503, 'storage_unavailable');
    expect(problem.detail).not.toMatch(/no payment was|sign a new/);
    expect(problem.detail).toContain('never charged again');
    expect(replay.headers.get('payment-required')).toBeNull();

    const again = await fetch(`${sick.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual(report);
    expect(await s.balanceOf(s.payTo)).toBe(payee0);
    expect(await s.balanceOf(payer)).toBe(payer0);
  });
});

describe('process killed after settlement', () => {
  it('answers 202 when the settled state cannot be recorded; a new instance restores the report through recovery; no second charge', async () => {
    const payer = addressOf(3);
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
    const { fetch: pay, signatures } = recordingPayingFetch(sick, 3);

    faulty.fail(dbFaults.statusUpdate('paid_reports', 'settled'));
    let res: Response;
    try {
      res = await pay(`${sick.url}/api/quick-check`);
    } finally {
      faulty.fail(null);
    }
    expect(res.status).toBe(202);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    const pending = await res.json();
    expect(pending).toMatchObject({ status: 'pending', orderId: expect.stringMatching(/^ord_[0-9a-f]{32}$/), recoveryKey: expect.any(String), retryAfter: expect.any(Number) });
    // The chain took the payment; the service never released the report.
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - QUICK_PRICE);
    const [tx] = await transfers(payer, s.payTo);
    expect(tx).toBeDefined();
    expect((await reportOfPayer(payer))[0]?.status).not.toBe('settled');

    // "Restart": a new instance on the same database, without the fault.
    const fresh = await startPaidStack({ devnet: s.devnet, database: s.t.database });
    try {
      const restored = await postJson(`${fresh.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
      expect(restored.status).toBe(200);
      const { report, receipt } = await restored.json();
      expect(report).toMatchObject({ status: 'PASS', network: 'eip155:8453' });
      expect(report.receipt).toBeUndefined();
      expect(receipt.subject).toMatchObject({ path: '/api/quick-check', price: '0.001', settlementTransaction: tx, network: 'eip155:8453' });
      expect(receipt.subject.payer.toLowerCase()).toBe(payer.toLowerCase());

      // The same authorization again: the stored report with the same receipt, not a second charge.
      const settle0 = s.devnet.facilitator.calls.settle;
      const replay = await fetch(`${fresh.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
      expect(replay.status).toBe(200);
      expect(await replay.json()).toEqual({ ...report, receipt });
      expect(decodePaymentResponseHeader(replay.headers.get('payment-response')!).transaction).toBe(tx);
      const again = await postJson(`${fresh.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
      expect(await again.json()).toEqual({ report, receipt });
      expect(s.devnet.facilitator.calls.settle).toBe(settle0);
    } finally {
      await fresh.close();
    }
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - QUICK_PRICE);
    expect(await transfers(payer, s.payTo)).toHaveLength(1);
  });

  it('restores a report whose settlement was never recorded at all from the txHash, with the order made beforehand', async () => {
    const payer = addressOf(4);
    const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
    const order = await (await postJson(`${s.url}/api/orders`, { path: '/api/quick-check', input: {} })).json();
    const { fetch: pay, signatures } = recordingPayingFetch(sick, 4);

    // Every status write of paid_reports is lost: the row stays "stored", as if the process died
    // right after the settle call returned.
    faulty.fail(dbFaults.statusUpdate('paid_reports'));
    let res: Response;
    try {
      res = await pay(`${sick.url}/api/quick-check`, { headers: { 'Report-Id': order.id, 'Recovery-Key': order.key } });
    } finally {
      faulty.fail(null);
    }
    expect(res.status).toBe(202);
    const pending = await res.json();
    expect(pending).toMatchObject({ status: 'pending', orderId: order.id });
    expect(pending.recoveryKey).toBeUndefined(); // the caller brought its own order
    expect((await reportOfPayer(payer))[0]).toMatchObject({ status: 'stored', settle_tx: null });
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    const [tx] = await transfers(payer, s.payTo);

    const fresh = await startPaidStack({ devnet: s.devnet, database: s.t.database });
    try {
      const recover = (txHash?: string) => postJson(`${fresh.url}/api/orders/recover`, { id: order.id, key: order.key, ...(txHash ? { txHash } : {}) });
      // A transaction that is not this payment's settlement proves nothing: still pending.
      // (Account 3's payment from an earlier test: this test must run in its file, as CI runs it.)
      const [otherTx] = await transfers(addressOf(3), s.payTo);
      expect(otherTx, 'a transfer from account 3 made by an earlier test of this file').toMatch(/^0x[0-9a-f]{64}$/);
      const wrong = await recover(otherTx);
      expect(wrong.status).toBe(202);
      expect(await wrong.json()).toMatchObject({ status: 'pending', orderId: order.id });
      const unknown = await recover(`0x${'cd'.repeat(32)}`);
      expect(unknown.status).toBe(202);

      const restored = await recover(tx);
      expect(restored.status).toBe(200);
      const { report, receipt } = await restored.json();
      expect(receipt.subject).toMatchObject({ path: '/api/quick-check', settlementTransaction: tx, price: '0.001' });

      // The order's headers now deliver the report without a payment; the authorization replays it.
      const byOrder = await fetch(`${fresh.url}/api/quick-check`, { headers: { 'Report-Id': order.id, 'Recovery-Key': order.key } });
      expect(byOrder.status).toBe(200);
      expect(await byOrder.json()).toEqual({ ...report, receipt });
      const replay = await fetch(`${fresh.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
      expect(replay.status).toBe(200);
      expect(await replay.json()).toEqual({ ...report, receipt });
    } finally {
      await fresh.close();
    }
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + QUICK_PRICE);
    expect(await s.balanceOf(payer)).toBe(payer0 - QUICK_PRICE);
    expect(await transfers(payer, s.payTo)).toHaveLength(1);
  });
});
