// Orders whose payment authorization can never be used: it expired unused, or the payer
// cancelled it. Own devnet: these tests move the chain's clock.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentSignatureHeader } from '@x402/core/http';
import { createPublicClient, createWalletClient, http, parseAbi, parseSignature, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { baseDevnetChain, USDC_ADDRESS } from '../../src/devnet/index.js';
import { devnetRpc, paidRowOf, postJson, recordingPayingFetch, startHoldingStack, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
}, 120_000);
afterAll(async () => {
  await s?.close();
});

const rowOf = (signature: string) => paidRowOf(s, signature);

/** Recovery of an order whose payment can never settle: 202 unpaid, saying why (spec: an order is unpaid, pending, available or expired). */
async function expectUnpaidAgain(res: Response, reason: RegExp) {
  expect(res.status).toBe(202);
  expect(res.headers.get('retry-after')).toBe('5');
  const body = await res.json();
  expect(body).toMatchObject({ status: 'unpaid', orderId: expect.stringMatching(/^ord_/), retryAfter: 5 });
  expect(body.reason).toMatch(reason);
}

/** Pays the quick check through a facilitator that holds the settle: a 202 with a recovery order. */
async function pendingPayment(payer: number) {
  const h = await startHoldingStack(s);
  h.stack.t.clock.set(new Date());
  const { fetch: pay, signatures } = recordingPayingFetch(h.stack, payer);
  const res = await pay(`${h.stack.url}/api/quick-check`);
  expect(res.status).toBe(202);
  const pending = (await res.json()) as { orderId: string; recoveryKey: string };
  const recover = () => postJson(`${h.stack.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
  return { h, signature: signatures[0]!, recover };
}

describe('an authorization that can never be used', () => {
  it('cancelled by the payer: the order fails with nothing charged', async () => {
    const payer = s.devnet.accounts[2]!;
    const before = await s.balanceOf(payer.address);
    const { h, signature, recover } = await pendingPayment(2);
    try {
      expect((await recover()).status).toBe(202);
      // The payer cancels the authorization (EIP-3009 cancelAuthorization) before anyone settles it.
      const { nonce } = (decodePaymentSignatureHeader(signature).payload as { authorization: { nonce: Hex } }).authorization;
      const account = privateKeyToAccount(payer.privateKey);
      const chain = baseDevnetChain(s.devnet.rpcUrl);
      const sig = parseSignature(
        await account.signTypedData({
          domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: USDC_ADDRESS },
          types: { CancelAuthorization: [{ name: 'authorizer', type: 'address' }, { name: 'nonce', type: 'bytes32' }] },
          primaryType: 'CancelAuthorization',
          message: { authorizer: account.address, nonce },
        }),
      );
      const wallet = createWalletClient({ account, chain, transport: http(s.devnet.rpcUrl) });
      const hash = await wallet.writeContract({
        address: USDC_ADDRESS,
        abi: parseAbi(['function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)']),
        functionName: 'cancelAuthorization',
        args: [account.address, nonce, Number(sig.v ?? BigInt(sig.yParity + 27)), sig.r, sig.s],
      });
      await createPublicClient({ chain, transport: http(s.devnet.rpcUrl) }).waitForTransactionReceipt({ hash });

      expectUnpaidAgain(await recover(), /cancelled.*nothing was charged: pay again/);
      expect(await rowOf(signature)).toMatchObject({ status: 'failed' });
      expect(await s.balanceOf(payer.address)).toBe(before);
    } finally {
      await h.close();
    }
  });

  it('expired unused: pending while the chain is before its validBefore, failed with nothing charged after', async () => {
    const payer = s.devnet.accounts[3]!;
    const before = await s.balanceOf(payer.address);
    const { h, signature, recover } = await pendingPayment(3);
    try {
      // The service's own clock says nothing: only chain time decides.
      h.stack.t.clock.set(new Date(Date.now() + 86_400_000));
      expect((await recover()).status).toBe(202);
      expect(await rowOf(signature)).toMatchObject({ status: 'pending' });

      // A block a minute past validBefore may still be replaced by one before it, where the
      // authorization could land: still pending. One second more, and it can never be used.
      const { validBefore } = (decodePaymentSignatureHeader(signature).payload as { authorization: { validBefore: string } }).authorization;
      await devnetRpc(s.devnet, 'evm_setNextBlockTimestamp', [Number(validBefore) + 60]);
      await devnetRpc(s.devnet, 'evm_mine', []);
      expect((await recover()).status).toBe(202);
      expect(await rowOf(signature)).toMatchObject({ status: 'pending' });
      await devnetRpc(s.devnet, 'evm_setNextBlockTimestamp', [Number(validBefore) + 61]);
      await devnetRpc(s.devnet, 'evm_mine', []);
      await expectUnpaidAgain(await recover(), /expired without being used\).*nothing was charged: pay again/);
      expect(await rowOf(signature)).toMatchObject({ status: 'failed' });
      // Held all along, the settle now reaches the facilitator: USDC refuses the expired authorization.
      await h.held[0]!().catch(() => undefined);
      expect(await s.balanceOf(payer.address)).toBe(before);
    } finally {
      await h.close();
    }
  });
});
