// One on-chain payment buys one report. A settlement found on chain (by a recovery order, a
// replay, or a caller's txHash) counts only when USDC moved exactly the price from the payer to
// us by that very authorization: the Transfer that USDC emits right after the authorization's
// AuthorizationUsed. Any other Transfer in the same transaction is not that payment.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { decodePaymentSignatureHeader } from '@x402/core/http';
import { authorizationTypes } from '@x402/evm';
import { encodeFunctionData, parseAbi, parseSignature, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { devnetClients, MULTICALL3_ADDRESS, USDC_ADDRESS, USDC_EIP712_DOMAIN } from '../../src/devnet/index.js';
import { recoverOrder, signPayment, startHoldingStack, startPaidStack, type PaidStack } from '../helpers/paid.js';

let base: PaidStack;
let h: Awaited<ReturnType<typeof startHoldingStack>>;
beforeAll(async () => {
  base = await startPaidStack();
  // The facilitator's settles never reach the chain (the service hears an uncertain outcome), so
  // the payer's own transaction is the one that uses the authorizations.
  h = await startHoldingStack(base);
});
afterAll(async () => {
  await h?.close();
  await base?.close();
});

const usdcAbi = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
]);
const multicallAbi = parseAbi(['function aggregate3((address target, bool allowFailure, bytes callData)[] calls) payable returns ((bool success, bytes returnData)[])']);

interface Authorization { from: Hex; to: Hex; value: bigint; validAfter: bigint; validBefore: bigint; nonce: Hex }
const transferCall = (a: Authorization, signature: Hex) => {
  const { v, r, s } = parseSignature(signature);
  return {
    target: USDC_ADDRESS,
    allowFailure: false,
    callData: encodeFunctionData({ abi: usdcAbi, functionName: 'transferWithAuthorization', args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, Number(v ?? 27n), r, s] }),
  };
};
const authorizationOf = (paymentSignature: string) => {
  const { authorization, signature } = decodePaymentSignatureHeader(paymentSignature).payload as {
    authorization: Record<keyof Authorization, string>;
    signature: Hex;
  };
  const a = authorization;
  return {
    authorization: { from: a.from as Hex, to: a.to as Hex, value: BigInt(a.value), validAfter: BigInt(a.validAfter), validBefore: BigInt(a.validBefore), nonce: a.nonce as Hex },
    signature,
  };
};

it('a transaction that pays one report and only uses up a second authorization releases one report, not two', async () => {
  const s = h.stack;
  const url = `${s.url}/api/quick-check`;
  const payerAccount = privateKeyToAccount(base.devnet.accounts[1]!.privateKey);
  const payee0 = await base.balanceOf(base.payTo);

  // Two genuine payments for a quick check each; both settles are uncertain, so both get orders.
  const paid = await signPayment(s, 1, url);
  const unpaid = await signPayment(s, 1, url);
  const orders: Array<{ orderId: string; recoveryKey: string }> = [];
  for (const sig of [paid, unpaid]) {
    const res = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(res.status).toBe(202);
    orders.push(await res.json());
  }

  // The payer's own transaction: the first authorization pays the price to us as signed; the
  // second's nonce is used up by a new authorization of 0 USDC from the payer to himself.
  const first = authorizationOf(paid);
  const worthless: Authorization = { from: payerAccount.address, to: payerAccount.address, value: 0n, validAfter: 0n, validBefore: 2n ** 40n, nonce: authorizationOf(unpaid).authorization.nonce };
  const worthlessSignature = await payerAccount.signTypedData({ domain: USDC_EIP712_DOMAIN, types: authorizationTypes, primaryType: 'TransferWithAuthorization', message: worthless });
  const { walletOf, mined } = devnetClients(base.devnet.rpcUrl, 'settlement-proof');
  const tx = await walletOf(payerAccount).writeContract({
    address: MULTICALL3_ADDRESS,
    abi: multicallAbi,
    functionName: 'aggregate3',
    args: [[transferCall(first.authorization, first.signature), transferCall(worthless, worthlessSignature)]],
  });
  expect((await mined(tx)).status).toBe('success');
  expect(await base.balanceOf(base.payTo)).toBe(payee0 + 1000n);

  const recover = (o: { orderId: string; recoveryKey: string }, txHash?: string) => recoverOrder(s, o, txHash);
  // The paid order is restored, and names the transaction; the other is not, not even when the
  // caller names that transaction, nor when its signature is replayed.
  const restored = await recover(orders[0]!);
  expect(restored.status, JSON.stringify(restored.body)).toBe(200);
  expect(JSON.stringify(restored.body)).toContain(tx);
  for (const attempt of [await recover(orders[1]!, tx), await recover(orders[1]!)]) {
    expect(attempt.status, JSON.stringify(attempt.body)).not.toBe(200);
    expect(attempt.status).toBeLessThan(500);
  }
  const replay = await fetch(url, { headers: { 'payment-signature': unpaid } });
  expect(replay.status).not.toBe(200);
  expect(replay.status).toBeLessThan(500);
});
