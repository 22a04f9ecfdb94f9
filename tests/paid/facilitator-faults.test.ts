// The facilitator and the chain failing around a payment: a rejected payment charges nothing and
// releases nothing; a slow or unanswered settlement is "pending" (202), never "nothing charged",
// and the report is restored once the chain shows the payment; an upstream failure while
// producing the report is a 502 with nothing settled.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPublicClient, createWalletClient, http, parseAbi, parseSignature, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { baseDevnetChain, freePort, USDC_ADDRESS, type Devnet } from '../../src/devnet/index.js';
import { expectProblem } from '../helpers/problems.js';
import {
  asInjected,
  dbFaults,
  eventually,
  faultyDatabase,
  paidRowOf,
  postJson,
  recordingPayingFetch,
  startHoldingStack,
  devnetRpc,
  startHttpProxy,
  startPaidStack,
  type PaidStack,
} from '../helpers/paid.js';

const QUICK_PRICE = 1_000n;

let s: PaidStack;
let devnet: Devnet;
beforeAll(async () => {
  s = await startPaidStack();
  devnet = s.devnet;
});
afterAll(async () => {
  devnet?.facilitator.setFaults({});
  await s?.close();
});

const addressOf = (i: number) => devnet.accounts[i]!.address;
/** The stored report bought with this PAYMENT-SIGNATURE, if any (keyed by payer:nonce). */
const rowOf = (signature: string) => paidRowOf(s, signature);
/** The answer's PAYMENT-REQUIRED is quick-check's x402 challenge. */
const expectQuickCheckChallenge = (res: Response) =>
  expect(decodePaymentRequiredHeader(res.headers.get('payment-required') ?? '').accepts[0]).toMatchObject({ scheme: 'exact', amount: String(QUICK_PRICE), payTo: s.payTo });
const reportsOf = (payer: string) =>
  s.t.database.db.selectFrom('paid_reports').selectAll().where('auth_id', 'like', `${payer.toLowerCase()}:%`).execute();

const eip3009Abi = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
]);

/** Submits an x402 exact (EIP-3009) authorization on chain from devnet account `submitter`. */
async function submitAuthorization(paymentPayload: { payload: { signature: Hex; authorization: Record<string, string> } }, submitter: number): Promise<void> {
  const chain = baseDevnetChain(devnet.rpcUrl);
  const wallet = createWalletClient({ account: privateKeyToAccount(devnet.accounts[submitter]!.privateKey), chain, transport: http(devnet.rpcUrl) });
  const pub = createPublicClient({ chain, transport: http(devnet.rpcUrl) });
  const a = paymentPayload.payload.authorization as { from: Hex; to: Hex; value: string; validAfter: string; validBefore: string; nonce: Hex };
  const sig = parseSignature(paymentPayload.payload.signature);
  const hash = await wallet.writeContract({
    address: USDC_ADDRESS,
    abi: eip3009Abi,
    functionName: 'transferWithAuthorization',
    args: [a.from, a.to, BigInt(a.value), BigInt(a.validAfter), BigInt(a.validBefore), a.nonce, Number(sig.v ?? BigInt(sig.yParity + 27)), sig.r, sig.s],
  });
  const receipt = await pub.waitForTransactionReceipt({ hash });
  if (receipt.status !== 'success') throw new Error('self-submitted authorization reverted');
}

/** Balances of the payee and `payer` now, and a check that they moved by exactly `charged`. */
async function ledger(payer: string) {
  const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer)];
  return async (charged: bigint) => {
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + charged);
    expect(await s.balanceOf(payer)).toBe(payer0 - charged);
  };
}

describe('the facilitator rejects the payment', () => {
  it.each([200, 500])('verify failing (HTTP %i) answers without charging or storing anything', async (failStatus) => {
    const payer = addressOf(1);
    const charged = await ledger(payer);
    const settle0 = devnet.facilitator.calls.settle;
    devnet.facilitator.setFaults({ failVerify: true, failStatus });
    const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
    let res: Response;
    try {
      res = await pay(`${s.url}/api/quick-check`);
    } finally {
      devnet.facilitator.setFaults({});
    }
    // The facilitator's verdict (in a 200 or a 500 body): a 402 with a fresh challenge, nothing charged.
    expect(res.status).toBe(402);
    expect(res.headers.get('payment-required')).toBeTruthy();
    expect(res.headers.get('payment-response')).toBeNull();
    expect(devnet.facilitator.calls.settle).toBe(settle0);
    expect(signatures).toHaveLength(1);
    expect(await rowOf(signatures[0]!)).toBeUndefined();
    await charged(0n);
  });

  it.each([200, 500])('settle failing (HTTP %i) is 402 payment_invalid: nothing charged, the report not released', async (failStatus) => {
    const payer = addressOf(2);
    const charged = await ledger(payer);
    const { fetch: pay, signatures } = recordingPayingFetch(s, 2);
    devnet.facilitator.setFaults({ failSettle: true, failStatus });
    let res: Response;
    try {
      res = await pay(`${s.url}/api/quick-check`);
    } finally {
      devnet.facilitator.setFaults({});
    }
    const problem = expectProblem(await asInjected(res), 402, 'payment_invalid');
    expect(problem.detail).toMatch(/nothing was charged/);
    expect(res.headers.get('payment-response')).toBeNull();
    // Like every 402, it carries the challenge to pay again from.
    expect(problem.detail).toMatch(/PAYMENT-REQUIRED/);
    expectQuickCheckChallenge(res);
    await charged(0n);
    const row = await rowOf(signatures.at(-1)!);
    expect(row).toMatchObject({ status: 'failed', settle_tx: null, receipt: null });

    // The failed authorization never buys the report later, and is never settled again.
    const settle0 = devnet.facilitator.calls.settle;
    const replay = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': signatures.at(-1)! } });
    expectProblem(await asInjected(replay), 402, 'payment_invalid');
    expectQuickCheckChallenge(replay);
    expect(devnet.facilitator.calls.settle).toBe(settle0);
    // Its order (created with the report) restores nothing either.
    const order = await s.t.database.db.selectFrom('orders').selectAll().where('report_id', '=', row!.id).executeTakeFirstOrThrow();
    expect(order.path).toBe('/api/quick-check');
    await charged(0n);
    // A fresh payment works.
    const ok = await pay(`${s.url}/api/quick-check`);
    expect(ok.status).toBe(200);
    await charged(QUICK_PRICE);
  });
});

describe('a refused payment replayed while no challenge can be made', () => {
  it('is 502 naming the refusal, never a 402 without PAYMENT-REQUIRED', async () => {
    const { fetch: pay, signatures } = recordingPayingFetch(s, 2);
    devnet.facilitator.setFaults({ failSettle: true });
    try {
      expect((await pay(`${s.url}/api/quick-check`)).status).toBe(402);
    } finally {
      devnet.facilitator.setFaults({});
    }
    // Another instance, started while its facilitator is unreachable: it has no challenge yet.
    const cut = await startPaidStack({ devnet, database: s.t.database, config: { facilitatorUrl: `http://127.0.0.1:${await freePort()}` } });
    try {
      const replay = await fetch(`${cut.url}/api/quick-check`, { headers: { 'payment-signature': signatures.at(-1)! } });
      const problem = expectProblem(await asInjected(replay), 502, 'upstream_unavailable');
      expect(problem.detail).toMatch(/could not be settled .*nothing was charged; no new payment can be asked for now/);
    } finally {
      await cut.close();
    }
  });
});

describe('the facilitator verifies too slowly', () => {
  it('is 502 with nothing stored or charged when verify outlasts the timeout', async () => {
    const payer = addressOf(2);
    const charged = await ledger(payer);
    const settle0 = devnet.facilitator.calls.settle;
    devnet.facilitator.setFaults({ delayMs: 4500 }); // above the service's facilitatorTimeoutMs (3000)
    let res: Response;
    try {
      res = await recordingPayingFetch(s, 2).fetch(`${s.url}/api/quick-check`);
    } finally {
      devnet.facilitator.setFaults({});
    }
    expectProblem(await asInjected(res), 502, 'upstream_unavailable');
    expect(devnet.facilitator.calls.settle).toBe(settle0);
    await charged(0n);
  });
});

describe('a recovery order whose payment was rejected', () => {
  it('can be paid again, and then restores the one report it bought', async () => {
    const payer = addressOf(1);
    const charged = await ledger(payer);
    const order = await (await postJson(`${s.url}/api/orders`, { path: '/api/quick-check', input: {} })).json();
    const headers = { 'Report-Id': order.id, 'Recovery-Key': order.key };
    const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
    devnet.facilitator.setFaults({ failSettle: true });
    let rejected: Response;
    try {
      rejected = await pay(`${s.url}/api/quick-check`, { headers });
    } finally {
      devnet.facilitator.setFaults({});
    }
    expectProblem(await asInjected(rejected), 402, 'payment_invalid');
    await charged(0n);

    const paid = await pay(`${s.url}/api/quick-check`, { headers });
    expect(paid.status).toBe(200);
    expect(signatures).toHaveLength(2);
    await charged(QUICK_PRICE);
    const { receipt, ...report } = await paid.json();
    const restored = await postJson(`${s.url}/api/orders/recover`, { id: order.id, key: order.key });
    expect(await restored.json()).toEqual({ report, receipt });
    // The rejected authorization stays rejected: replaying it neither charges nor delivers.
    const replay = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
    expectProblem(await asInjected(replay), 402, 'payment_invalid');
    await charged(QUICK_PRICE);
  });
});

describe('the facilitator settles slowly or does not answer', () => {
  it('answers 202 pending with a recovery order when settle outlasts the timeout; the report is restored once the chain shows it', async () => {
    const payer = addressOf(3);
    const charged = await ledger(payer);
    // Slow down only the settle: arm the delay when the report is stored (after verify, before settle).
    const armed = faultyDatabase(s.t.database);
    armed.fail((node) => {
      if (dbFaults.insertInto('paid_reports')(node)) devnet.facilitator.setFaults({ delayMs: 4500 });
      return false;
    });
    const slow = await startPaidStack({ devnet, database: armed });
    const settle0 = devnet.facilitator.calls.settle;
    try {
      const res = await recordingPayingFetch(slow, 3).fetch(`${slow.url}/api/quick-check`);
      expect(res.status).toBe(202);
      const pending = await res.json();
      expect(pending).toMatchObject({
        status: 'pending',
        orderId: expect.stringMatching(/^ord_[0-9a-f]{32}$/),
        recoveryKey: expect.stringMatching(/^ork_/),
        retryAfter: expect.any(Number),
      });
      expect(res.headers.get('retry-after')).toBe(String(pending.retryAfter));
      expect(res.headers.get('payment-response')).toBeNull();

      // The facilitator finishes after its delay: the chain shows the payment.
      const payee0 = await s.balanceOf(s.payTo);
      await eventually(async () => (await s.balanceOf(s.payTo)) > payee0, 'the delayed settlement on chain');
      await charged(QUICK_PRICE);
      devnet.facilitator.setFaults({});

      const restored = await postJson(`${slow.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
      expect(restored.status).toBe(200);
      const { report, receipt } = await restored.json();
      expect(report).toMatchObject({ status: 'PASS' });
      expect(receipt.subject).toMatchObject({ path: '/api/quick-check', price: '0.001' });
      expect(devnet.facilitator.calls.settle - settle0).toBe(1);
      await charged(QUICK_PRICE);
    } finally {
      devnet.facilitator.setFaults({});
      await slow.close();
    }
  });

  it('polls of a pending report send no second settle while the first may still run; a refusal frees the next at once', async () => {
    const payer = addressOf(4);
    const charged = await ledger(payer);
    let settles = 0;
    let refuseNext = false;
    // Settles reach the facilitator 2.5 s late, after the service (1 s timeout) has given up on them.
    const proxy = await startHttpProxy(devnet.facilitatorUrl, async (req, forward) => {
      if (req.url !== '/settle') return forward();
      settles++;
      if (refuseNext) {
        refuseNext = false;
        return { status: 200, body: JSON.stringify({ success: false, errorReason: 'unexpected_settle_error', transaction: '', network: 'eip155:8453' }) };
      }
      await new Promise((r) => setTimeout(r, 2500));
      return forward();
    });
    const slow = await startPaidStack({ devnet, database: s.t.database, config: { facilitatorUrl: proxy.url, facilitatorTimeoutMs: 1000 } });
    try {
      const res = await recordingPayingFetch(slow, 4).fetch(`${slow.url}/api/quick-check`);
      expect(res.status).toBe(202);
      const pending = await res.json();
      expect(pending.reason).toBe('facilitator_timeout');
      const recover = () => postJson(`${slow.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
      // A client polling as told (and retrying its own timeouts): only the chain is looked at.
      const polls = await Promise.all([1, 2, 3, 4].map(async () => (await recover()).json()));
      expect(polls.map((p) => [p.status, p.reason])).toEqual(Array(4).fill(['pending', 'settlement in progress']));
      await eventually(async () => (await recover()).status === 200, 'the first settle, landed late, restores the report');
      expect(settles).toBe(1);
      await charged(QUICK_PRICE);

      // A settle the facilitator refuses (not a pre-broadcast refusal: uncertain) runs nothing
      // more there: the next poll settles again at once.
      refuseNext = true;
      const next = await recordingPayingFetch(slow, 4).fetch(`${slow.url}/api/quick-check`);
      expect(next.status).toBe(202);
      const second = await next.json();
      const again = await postJson(`${slow.url}/api/orders/recover`, { id: second.orderId, key: second.recoveryKey });
      expect(settles).toBe(3);
      expect([202, 200]).toContain(again.status);
      await eventually(async () => (await postJson(`${slow.url}/api/orders/recover`, { id: second.orderId, key: second.recoveryKey })).status === 200, 'the second report');
      expect(settles).toBe(3);
      await charged(2n * QUICK_PRICE);
    } finally {
      await slow.close();
      await proxy.close();
    }
  }, 60_000);

  it.each([
    ['the connection drops', 'drop'],
    ['a gateway answers 502 with a non-JSON body', 'bad-gateway'],
  ] as const)('answers 202 (never "nothing was charged") when the settle went through but %s', async (_what, mode) => {
    const payer = addressOf(4);
    const charged = await ledger(payer);
    // Between the service and the facilitator: settle reaches the facilitator (the transfer lands)
    // but its answer never comes back.
    const proxy = await startHttpProxy(devnet.facilitatorUrl, async (req, forward) => {
      const answer = await forward();
      if (req.url !== '/settle') return answer;
      return mode === 'drop' ? 'drop' : { status: 502, headers: { 'content-type': 'text/html' }, body: '<html>502 Bad Gateway</html>' };
    });
    const cut = await startPaidStack({ devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
    try {
      const { fetch: pay, signatures } = recordingPayingFetch(cut, 4);
      const res = await pay(`${cut.url}/api/quick-check`);
      await charged(QUICK_PRICE); // the chain took it
      // Uncertain: 202 with the order to restore from, never a 402 saying nothing was charged.
      expect(res.status, await res.clone().text()).toBe(202);
      const pending = await res.json();
      expect(pending).toMatchObject({ status: 'pending', orderId: expect.any(String), recoveryKey: expect.any(String) });
      expect(pending.reason).toBe('facilitator_unavailable');

      const restored = await postJson(`${cut.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
      expect(restored.status).toBe(200);
      const replay = await fetch(`${cut.url}/api/quick-check`, { headers: { 'payment-signature': signatures.at(-1)! } });
      expect(replay.status).toBe(200);
      await charged(QUICK_PRICE);
    } finally {
      await cut.close();
      await proxy.close();
    }
  });
});

describe('the authorization is settled by someone else', () => {
  it('releases the report once when the payer submits the authorization on chain before the facilitator does', async () => {
    const payer = addressOf(8);
    const charged = await ledger(payer);
    // Anyone holding the signed EIP-3009 authorization can submit it; here a third party does,
    // between the service's verify and its settle. The facilitator then finds the nonce used.
    const proxy = await startHttpProxy(devnet.facilitatorUrl, async (req, forward) => {
      if (req.url === '/settle') await submitAuthorization(JSON.parse(req.body).paymentPayload, 0);
      return forward();
    });
    const raced = await startPaidStack({ devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
    try {
      const { fetch: pay, signatures } = recordingPayingFetch(raced, 8);
      const res = await pay(`${raced.url}/api/quick-check`);
      await charged(QUICK_PRICE);
      expect([200, 202], await res.clone().text()).toContain(res.status);
      if (res.status === 202) {
        const pending = await res.json();
        const restored = await postJson(`${raced.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
        expect(restored.status).toBe(200);
      }
      const replay = await fetch(`${raced.url}/api/quick-check`, { headers: { 'payment-signature': signatures.at(-1)! } });
      expect(replay.status).toBe(200);
      await charged(QUICK_PRICE);
    } finally {
      await raced.close();
      await proxy.close();
    }
  });

  it('a "transaction failed" from the facilitator is uncertain, never "nothing was charged": the transfer may land later', async () => {
    // The exact scheme answers invalid_exact_evm_transaction_failed when sending threw, which can
    // happen after the transaction was broadcast. A 402 would make the client sign and pay again
    // (a double charge once both land), so the answer is a recovery order.
    const payer = addressOf(0);
    const charged = await ledger(payer);
    let deferred: (() => Promise<unknown>) | undefined;
    const proxy = await startHttpProxy(devnet.facilitatorUrl, async (req, forward) => {
      if (req.url !== '/settle') return forward();
      deferred = forward; // the facilitator will get this settle later, when the test says so
      return { status: 200, body: JSON.stringify({ success: false, errorReason: 'invalid_exact_evm_transaction_failed', transaction: '', network: 'eip155:8453' }) };
    });
    const liar = await startPaidStack({ devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
    try {
      const { fetch: pay, signatures } = recordingPayingFetch(liar, 0);
      const res = await pay(`${liar.url}/api/quick-check`);
      expect(res.status).toBe(202);
      const pending = await res.json();
      expect(pending).toMatchObject({ status: 'pending', orderId: expect.any(String), recoveryKey: expect.any(String) });
      expect(signatures).toHaveLength(1); // the client was not asked to pay again
      await charged(0n);
      expect(await rowOf(signatures.at(-1)!)).toMatchObject({ status: 'pending' });

      await deferred!(); // the transfer lands after all
      await charged(QUICK_PRICE);
      const settle0 = devnet.facilitator.calls.settle;
      const restored = await postJson(`${liar.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
      expect(restored.status).toBe(200);
      const body = await restored.json();
      expect(body.receipt.subject).toMatchObject({ path: '/api/quick-check', price: '0.001' });
      const replay = await fetch(`${liar.url}/api/quick-check`, { headers: { 'payment-signature': signatures.at(-1)! } });
      expect(replay.status).toBe(200);
      expect(devnet.facilitator.calls.settle).toBe(settle0); // found on chain, not settled again
      await charged(QUICK_PRICE);
    } finally {
      await liar.close();
      await proxy.close();
    }
  });
});

describe('a settlement left uncertain', () => {
  it('is found by recovery even when it lands many blocks after the order (logs are read in chunks)', async () => {
    const payer = addressOf(3);
    const charged = await ledger(payer);
    // Chunks of 400 blocks (RPC_LOG_BLOCK_RANGE), 1,000 blocks mined: the settlement is in the third.
    const h = await startHoldingStack(s, { rpcLogBlockRange: 400 });
    h.stack.t.clock.set(new Date());
    try {
      const res = await recordingPayingFetch(h.stack, 3).fetch(`${h.stack.url}/api/quick-check`);
      expect(res.status).toBe(202);
      const pending = await res.json();
      // At one timestamp, so that the authorization stays valid.
      expect(await devnetRpc(devnet, 'anvil_mine', ['0x3e8', '0x0'])).toMatchObject({ result: null });
      await h.held[0]!(); // the held settle reaches the facilitator, and lands
      await charged(QUICK_PRICE);
      const restored = await postJson(`${h.stack.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
      expect(restored.status).toBe(200);
      expect((await restored.json()).receipt.subject).toMatchObject({ path: '/api/quick-check', price: '0.001' });
      await charged(QUICK_PRICE);
    } finally {
      await h.close();
    }
  });

});

describe('upstream failure while producing the report', () => {
  it('is 502 with nothing charged when the chain is unreachable', async () => {
    const payer = addressOf(6);
    const charged = await ledger(payer);
    const dead = await startPaidStack({ devnet, database: s.t.database, config: { rpcUrls: [`http://127.0.0.1:${await freePort()}`], rpcTimeoutMs: 2000 } });
    try {
      const res = await recordingPayingFetch(dead, 6).fetch(`${dead.url}/api/quick-check`);
      expectProblem(await asInjected(res), 502, 'upstream_unavailable');
      expect(res.headers.get('payment-response')).toBeNull();
    } finally {
      await dead.close();
    }
    expect(await reportsOf(payer)).toEqual([]);
    await charged(0n);
  });

  it('is 502 with nothing settled when the report itself cannot be produced; the authorization still buys it later', async () => {
    const payer = addressOf(7);
    const charged = await ledger(payer);
    // The block number reads fine (the pipeline reads it first); the quick check's eth_getCode fails.
    const rpc = await startHttpProxy(devnet.rpcUrl, async (req, forward) => {
      const calls = [JSON.parse(req.body || '{}')].flat() as Array<{ id: number; method: string }>;
      if (!calls.some((c) => c.method === 'eth_getCode')) return forward();
      const errors = calls.map((c) => ({ jsonrpc: '2.0', id: c.id, error: { code: -32603, message: 'injected upstream failure' } }));
      return { status: 200, body: JSON.stringify(Array.isArray(JSON.parse(req.body)) ? errors : errors[0]) };
    });
    const broken = await startPaidStack({ devnet, database: s.t.database, config: { rpcUrls: [rpc.url] } });
    const settle0 = devnet.facilitator.calls.settle;
    try {
      const { fetch: pay, signatures } = recordingPayingFetch(broken, 7);
      const res = await pay(`${broken.url}/api/quick-check`);
      expectProblem(await asInjected(res), 502, 'upstream_unavailable');
      expect(devnet.facilitator.calls.settle).toBe(settle0);
      expect(await reportsOf(payer)).toEqual([]);
      await charged(0n);

      // Nothing was stored or settled, so the same authorization buys the report once the chain is back.
      const retry = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': signatures.at(-1)! } });
      expect(retry.status).toBe(200);
      await charged(QUICK_PRICE);
    } finally {
      await broken.close();
      await rpc.close();
    }
  });
});
