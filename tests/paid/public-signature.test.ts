// Once settled, a purchase's PAYMENT-SIGNATURE is public: EIP-3009's transferWithAuthorization
// carries the authorization and its signature in calldata, and the rest of the x402 payload is the
// public 402 challenge. An outsider who rebuilds it from the chain must not be handed the report
// someone else bought (nor learn, from the answers, what was bought), once the buyer's own
// lost-answer retries are over: PAID_REPLAY_WINDOW_SECONDS after the report was delivered.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { createPublicClient, decodeFunctionData, getAddress, http, parseAbi, parseAbiItem, serializeSignature, type Hex } from 'viem';
import { baseDevnetChain, USDC_ADDRESS } from '../../src/devnet/index.js';
import { ManualClock } from '../../src/platform/clock.js';
import { eventually, paidRowOf, postJson, recoverOrder, recordingPayingFetch, startHoldingStack, startPaidStack, type PaidStack } from '../helpers/paid.js';

const WINDOW_S = 3600;
let s: PaidStack;
let clock: ManualClock;
beforeAll(async () => {
  clock = new ManualClock(new Date());
  s = await startPaidStack({ clock });
});
afterAll(async () => {
  await s?.close();
});

const twa = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
]);

/** The PAYMENT-SIGNATURE of every settled authorization, rebuilt from a public challenge and the public chain alone. */
async function rebuildFromChain(url: string, init: RequestInit = {}): Promise<Map<string, string>> {
  const challenge = await fetch(url, init);
  expect(challenge.status).toBe(402);
  const required = decodePaymentRequiredHeader(challenge.headers.get('payment-required')!);
  const pub = createPublicClient({ chain: baseDevnetChain(s.devnet.rpcUrl), transport: http(s.devnet.rpcUrl) });
  const logs = await pub.getLogs({ address: USDC_ADDRESS, event: parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)'), fromBlock: 0n });
  const byNonce = new Map<string, string>();
  for (const log of logs) {
    const tx = await pub.getTransaction({ hash: log.transactionHash! });
    const { args } = decodeFunctionData({ abi: twa, data: tx.input });
    const [from, to, value, validAfter, validBefore, nonce] = args as unknown as [Hex, Hex, bigint, bigint, bigint, Hex];
    const signature = args.length === 9 ? serializeSignature({ v: BigInt(args[6] as number), r: args[7] as Hex, s: args[8] as Hex }) : (args[6] as Hex);
    const payload = {
      x402Version: 2,
      payload: {
        authorization: { from: getAddress(from), to: getAddress(to), value: value.toString(), validAfter: validAfter.toString(), validBefore: validBefore.toString(), nonce },
        signature,
      },
      extensions: required.extensions,
      resource: required.resource,
      accepted: required.accepts[0]!,
    };
    byNonce.set(nonce.toLowerCase(), encodePaymentSignatureHeader(payload as never));
  }
  return byNonce;
}

const nonceOf = (signature: string) => (JSON.parse(Buffer.from(signature, 'base64').toString('utf8')) as { payload: { authorization: { nonce: string } } }).payload.authorization.nonce.toLowerCase();

/** Waits until the service has recorded that the report was delivered (it does so once the answer is written out). */
async function delivered(signature: string): Promise<void> {
  await eventually(async () => (await paidRowOf(s, signature))?.delivered_at != null, 'the delivery recorded');
}

const proofInput = (txHash: string) => ({ chain: 'base', txHash, expectedTo: s.payTo, expectedAmount: '1' });
const post = (body: unknown, headers: Record<string, string> = {}): RequestInit => ({ method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

describe('a settled purchase replayed from public data', () => {
  it('the buyer retries within the window and gets the report; past it, the rebuilt signature gets nothing and nothing is charged', async () => {
    const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
    const bought = await pay(`${s.url}/api/quick-check`);
    expect(bought.status).toBe(200);
    const report = await bought.json();
    await delivered(signatures[0]!);
    const rebuilt = (await rebuildFromChain(`${s.url}/api/quick-check`)).get(nonceOf(signatures[0]!))!;
    expect(rebuilt).toBeDefined();

    // A lost answer, retried at once: the same report, charged once.
    const payee0 = await s.balanceOf(s.payTo);
    const retry = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
    expect(retry.status).toBe(200);
    expect(await retry.json()).toEqual(report);
    // The window is WINDOW_S seconds from the first delivery, its last millisecond included.
    clock.advance(WINDOW_S * 1000);
    const late = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
    expect(late.status).toBe(200);
    expect(await late.json()).toEqual(report);

    clock.advance(1000);
    for (const header of [rebuilt, signatures[0]!]) {
      const res = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': header } });
      expect(res.status).toBe(409);
      const problem = await res.json();
      expect(problem.code).toBe('payment_conflict');
      expect(problem.detail).toContain('/api/orders/recover');
      expect(JSON.stringify(problem)).not.toContain('"report"');
    }
    expect(await s.balanceOf(s.payTo)).toBe(payee0);
  });

  it('past the window, the right input and a wrong guess get the same answer: nothing tells what was bought', async () => {
    const input = proofInput(`0x${'cd'.repeat(32)}`);
    const { fetch: pay, signatures } = recordingPayingFetch(s, 2);
    expect((await pay(`${s.url}/api/verify-payment`, post(input))).status).toBe(200);
    await delivered(signatures[0]!);
    const rebuilt = (await rebuildFromChain(`${s.url}/api/verify-payment`, post(input))).get(nonceOf(signatures[0]!))!;

    // Within the window another input is told apart from the one bought (409 against 200).
    const guess = await fetch(`${s.url}/api/verify-payment`, post(proofInput(`0x${'ef'.repeat(32)}`), { 'payment-signature': rebuilt }));
    expect(guess.status).toBe(409);
    expect((await guess.json()).detail).toContain('another input');

    clock.advance((WINDOW_S + 1) * 1000);
    const answers = [];
    for (const body of [input, proofInput(`0x${'ef'.repeat(32)}`)]) {
      const res = await fetch(`${s.url}/api/verify-payment`, post(body, { 'payment-signature': rebuilt }));
      const { requestId: _id, ...problem } = await res.json();
      answers.push({ status: res.status, problem });
    }
    expect(answers[0]!.status).toBe(409);
    expect(answers[1]).toEqual(answers[0]);
  });

  it("the order's Report-Id and Recovery-Key, never on chain, still restore the report past the window", async () => {
    const input = proofInput(`0x${'ab'.repeat(32)}`);
    const order = await postJson(`${s.url}/api/orders`, { path: '/api/verify-payment', input });
    expect(order.status).toBe(201);
    const { id, key } = await order.json();
    const { fetch: pay, signatures } = recordingPayingFetch(s, 3);
    const bought = await pay(`${s.url}/api/verify-payment`, post(input, { 'report-id': id, 'recovery-key': key }));
    expect(bought.status).toBe(200);
    const { receipt, ...report } = await bought.json();
    await delivered(signatures[0]!);

    clock.advance((WINDOW_S + 1) * 1000);
    const restored = await recoverOrder(s, { orderId: id, recoveryKey: key });
    expect(restored.status).toBe(200);
    expect(restored.body).toEqual({ report, receipt });
    // The paid route with the order's headers (and its signature) delivers it too.
    const again = await fetch(`${s.url}/api/verify-payment`, post(input, { 'report-id': id, 'recovery-key': key, 'payment-signature': signatures[0]! }));
    expect(again.status).toBe(200);
  });

  it('the window starts when the report is first delivered, not when it was bought: a pending purchase is released to its signature later', async () => {
    // A facilitator that holds the settle and says "transaction failed" (uncertain): 202 pending.
    const hold = await startHoldingStack(s, {}, clock);
    try {
      const { fetch: pay, signatures } = recordingPayingFetch(hold.stack, 4);
      const pending = await pay(`${hold.stack.url}/api/quick-check`);
      expect(pending.status).toBe(202);
      await pending.body?.cancel();
      clock.advance((WINDOW_S + 1) * 1000);
      await hold.held[0]!(); // the transfer lands now
      const res = await fetch(`${s.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
      expect(res.status).toBe(200);
      await delivered(signatures[0]!);
    } finally {
      await hold.close();
    }
  });
});
