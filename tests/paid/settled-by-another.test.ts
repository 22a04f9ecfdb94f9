// The signed authorization is put on chain by someone other than our facilitator (the payer's own
// wallet, a relayer) right after verify passed and before the service read the block its search
// for the settlement starts at. Our settle is then refused (nonce used), the buyer is charged, and
// the report must still be released by a plain recover, without the buyer having to find and name
// the transaction.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPublicClient, createWalletClient, http, parseAbi, parseSignature, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { baseDevnetChain, USDC_ADDRESS } from '../../src/devnet/index.js';
import { devnetRpc, paidRowOf, postJson, recordingPayingFetch, startHttpProxy, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
});
afterAll(async () => {
  await s?.close();
});

const transferWithAuthorization = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
]);

/** Submits an x402 exact payment's authorization on chain from another account, as anyone holding it could. */
async function submitElsewhere(payment: { payload: { signature: Hex; authorization: Record<string, string> } }): Promise<Hex> {
  const chain = baseDevnetChain(s.devnet.rpcUrl);
  const wallet = createWalletClient({ account: privateKeyToAccount(s.devnet.accounts[0]!.privateKey), chain, transport: http(s.devnet.rpcUrl) });
  const a = payment.payload.authorization;
  const sig = parseSignature(payment.payload.signature);
  const hash = await wallet.writeContract({
    address: USDC_ADDRESS,
    abi: transferWithAuthorization,
    functionName: 'transferWithAuthorization',
    args: [a.from as Hex, a.to as Hex, BigInt(a.value!), BigInt(a.validAfter!), BigInt(a.validBefore!), a.nonce as Hex, Number(sig.v ?? BigInt(sig.yParity + 27)), sig.r, sig.s],
  });
  await createPublicClient({ chain, transport: http(s.devnet.rpcUrl) }).waitForTransactionReceipt({ hash });
  return hash;
}

it('a payment put on chain by another right after verify: charged once, and a plain recover releases the report', async () => {
  let landed: Hex | undefined;
  const proxy = await startHttpProxy(s.devnet.facilitatorUrl, async (req, forward) => {
    if (req.url !== '/verify') return forward();
    const answer = await forward();
    landed = await submitElsewhere(JSON.parse(req.body).paymentPayload);
    await devnetRpc(s.devnet, 'anvil_mine', ['0x2']); // the service reads its head blocks later
    return answer;
  });
  const raced = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
  try {
    const payer = s.devnet.accounts[7]!.address;
    const before = await s.balanceOf(payer);
    const { fetch: pay, signatures } = recordingPayingFetch(raced, 7);
    const res = await pay(`${raced.url}/api/quick-check`);
    expect(res.status).toBe(202);
    const pending = await res.json();
    expect(landed).toBeDefined();
    expect(before - (await s.balanceOf(payer))).toBe(1000n);
    const row = await paidRowOf(raced, signatures.at(-1)!);
    expect(row?.status).toBe('pending');

    const recovered = await postJson(`${raced.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
    expect(recovered.status).toBe(200);
    const delivered = await recovered.json();
    expect(delivered.report.status).toBe('PASS');
    expect(delivered.receipt.subject.settlementTransaction).toBe(landed);
    expect(before - (await s.balanceOf(payer))).toBe(1000n);
  } finally {
    await raced.close();
    await proxy.close();
  }
});
