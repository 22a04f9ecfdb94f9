// A paid report whose settlement the service looks up on chain (a recovery order, a replay, a
// caller's txHash) is released only on evidence from Base. A service whose RPC URL points at a
// fork or a testnet by mistake must not take that chain's word that the payment settled: the
// RPC here is a real anvil forking the devnet after the payment, so it holds the very same
// settlement transaction, and only the chain check tells it from Base.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { ChainHandle } from '../../src/devnet/index.js';
import { recoverOrder, signPayment, startHoldingStack, startPaidStack, type PaidStack } from '../helpers/paid.js';
import { startWrongChainFork } from '../helpers/wrong-chain.js';

let base: PaidStack;
let h: Awaited<ReturnType<typeof startHoldingStack>>;
let fork: ChainHandle | undefined;
let wrong: PaidStack | undefined;
beforeAll(async () => {
  base = await startPaidStack();
  // Settles are held back: the service hears an uncertain outcome and answers 202 with an order.
  h = await startHoldingStack(base);
}, 60_000);
afterAll(async () => {
  await wrong?.close();
  await fork?.stop();
  await h?.close();
  await base?.close();
});

it('a recovery order is not released on the word of an RPC that does not serve Base', async () => {
  const url = `${h.stack.url}/api/quick-check`;
  const sig = await signPayment(h.stack, 1, url);
  const held = await fetch(url, { headers: { 'payment-signature': sig } });
  expect(held.status).toBe(202);
  const order = (await held.json()) as { orderId: string; recoveryKey: string };

  // The held settle now reaches the chain: the payment is made.
  const payee0 = await base.balanceOf(base.payTo);
  const settled = JSON.parse((await h.held[0]!()).body) as { success: boolean; transaction: string };
  expect(settled.success).toBe(true);
  expect(await base.balanceOf(base.payTo)).toBe(payee0 + 1000n);

  fork = await startWrongChainFork(base.devnet.rpcUrl);
  wrong = await startPaidStack({ devnet: base.devnet, database: base.t.database, config: { rpcUrls: [fork.rpcUrl], rpcTimeoutMs: 5000 } });
  // Neither the order's own lookup nor the caller naming the settlement transaction releases it.
  for (const attempt of [await recoverOrder(wrong, order), await recoverOrder(wrong, order, settled.transaction)]) {
    expect(attempt.status, JSON.stringify(attempt.body)).not.toBe(200);
    expect(attempt.status).toBeLessThan(500);
    expect(JSON.stringify(attempt.body)).not.toContain('"report"');
  }

  // The service reading Base releases it.
  const restored = await recoverOrder(base, order);
  expect(restored.status, JSON.stringify(restored.body)).toBe(200);
});
