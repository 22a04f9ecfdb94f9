// A 402 (and any other answer the x402 SDK gives instead of the report, such as its 412) is a
// problem body like every non-2xx (DESIGN.md section 3), with the reason in `detail` and this
// request's id, while the PAYMENT-REQUIRED header still carries the challenge the official
// client pays from.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { expectProblem } from '../helpers/problems.js';
import { asInjected, recordingPayingFetch, signPayment, startHttpProxy, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
});
afterAll(async () => {
  await s?.close();
});

const ADDRESS = '0x1111111111111111111111111111111111111111';
const postJson = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
const proofInput = { chain: 'base', txHash: `0x${'ab'.repeat(32)}`, expectedTo: ADDRESS, expectedAmount: '1' };

describe('the 402 challenge', () => {
  it.each([
    ['GET /api/quick-check', () => fetch(`${s.url}/api/quick-check`), '1000', '0.001'],
    ['POST /api/token-risk', () => postJson('/api/token-risk', { chain: 'base', address: ADDRESS }), '250000', '0.25'],
    ['POST /api/verify-payment', () => postJson('/api/verify-payment', proofInput), '10000', '0.01'],
  ])('%s: problem body payment_required, challenge in PAYMENT-REQUIRED', async (_route, send, amount, price) => {
    const res = await send();
    const problem = expectProblem(await asInjected(res), 402, 'payment_required');
    expect(problem.title).toBe('Payment required');
    expect(problem.detail).toContain(`${price} USDC`);
    expect(problem.detail).toMatch(/PAYMENT-REQUIRED/);
    expect(problem.detail).toMatch(/nothing was charged/);
    const challenge = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(challenge.x402Version).toBe(2);
    expect(challenge.accepts[0]).toMatchObject({ scheme: 'exact', network: 'eip155:8453', amount, payTo: s.payTo });
  });

  it('carries this request\'s id, also when the challenge itself is reused', async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const problem = expectProblem(await asInjected(await fetch(`${s.url}/api/quick-check`)), 402, 'payment_required');
      ids.add(problem.requestId);
    }
    expect(ids.size).toBe(3);
  });

  it('the official client still pays from it', async () => {
    const res = await s.payingFetch(1)(`${s.url}/api/quick-check`);
    expect(res.status).toBe(200);
    expect(res.headers.get('payment-response')).toBeTruthy();
  });
});

describe('a payment that is not accepted', () => {
  it('for another route (no matching requirements): 402 payment_invalid with the reason, and a fresh challenge', async () => {
    const sig = await signPayment(s, 2, `${s.url}/api/quick-check`);
    const res = await postJson('/api/verify-payment', proofInput, { 'payment-signature': sig });
    const problem = expectProblem(await asInjected(res), 402, 'payment_invalid');
    expect(problem.detail).toMatch(/No matching payment requirements/);
    expect(problem.detail).toMatch(/nothing was charged/);
    expect(decodePaymentRequiredHeader(res.headers.get('payment-required')!).error).toBe('No matching payment requirements');
  });

  it('refused by the facilitator: 402 payment_invalid naming its reason', async () => {
    s.devnet.facilitator.setFaults({ failVerify: true });
    let res: Response;
    try {
      res = await recordingPayingFetch(s, 2).fetch(`${s.url}/api/quick-check`);
    } finally {
      s.devnet.facilitator.setFaults({});
    }
    const problem = expectProblem(await asInjected(res), 402, 'payment_invalid');
    expect(problem.title).toBe('Payment not accepted');
    expect(problem.detail).toMatch(/devnet_fault_injected/);
    expect(res.headers.get('payment-required')).toBeTruthy();
  });

  it('the SDK\'s 412 (permit2_allowance_required) is a problem body too', async () => {
    const proxy = await startHttpProxy(s.devnet.facilitatorUrl, async (req, forward) =>
      req.url === '/verify' ? { status: 200, body: JSON.stringify({ isValid: false, invalidReason: 'permit2_allowance_required' }) } : forward(),
    );
    const other = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
    try {
      const sig = await signPayment(other, 3, `${other.url}/api/quick-check`);
      const res = await fetch(`${other.url}/api/quick-check`, { headers: { 'payment-signature': sig } });
      const problem = expectProblem(await asInjected(res), 412, 'precondition_failed');
      expect(problem.detail).toMatch(/permit2_allowance_required/);
      expect(res.headers.get('payment-required')).toBeTruthy();
    } finally {
      await other.close();
      await proxy.close();
    }
  });
});
