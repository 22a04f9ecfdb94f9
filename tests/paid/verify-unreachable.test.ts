// A facilitator that cannot be reached while verifying (connection refused or dropped, a
// gateway's non-JSON 5xx) has given no verdict on the payment: that is 502 upstream_unavailable
// with nothing stored or charged, never a 402 that reads as "your payment was rejected" and makes
// a client sign a fresh one. The facilitator's own verdict (a body with isValid) stays a 402.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem } from '../helpers/problems.js';
import { asInjected, paidRowOf, signPayment, startHttpProxy, startPaidStack, type PaidStack, type ProxyRule } from '../helpers/paid.js';

let base: PaidStack;
let s: PaidStack;
let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
beforeAll(async () => {
  base = await startPaidStack();
  proxy = await startHttpProxy(base.devnet.facilitatorUrl);
  s = await startPaidStack({ devnet: base.devnet, database: base.t.database, config: { facilitatorUrl: proxy.url } });
});
afterAll(async () => {
  await s?.close();
  await proxy?.close();
  await base?.close();
});

const rowOf = (signature: string) => paidRowOf(s, signature);

const onVerify = (answer: Awaited<ReturnType<ProxyRule>>): ProxyRule => async (req, forward) => (req.url === '/verify' ? answer : forward());

describe('verify without the facilitator\'s answer', () => {
  it.each([
    ['the connection is dropped', onVerify('drop')],
    ['a gateway answers a non-JSON 502', onVerify({ status: 502, headers: { 'content-type': 'text/html' }, body: '<html><body>502 Bad Gateway</body></html>' })],
    ['a gateway answers JSON without a verdict', onVerify({ status: 503, body: JSON.stringify({ message: 'upstream connect error' }) })],
  ])('502 upstream_unavailable when %s; nothing stored, settled or charged', async (_name, rule) => {
    const url = `${s.url}/api/quick-check`;
    const sig = await signPayment(s, 4, url);
    const payer = s.devnet.accounts[4]!.address;
    const [payee0, payer0, settle0] = [await s.balanceOf(s.payTo), await s.balanceOf(payer), s.devnet.facilitator.calls.settle];
    proxy.setRule(rule);
    let res: Response;
    try {
      res = await fetch(url, { headers: { 'payment-signature': sig } });
    } finally {
      proxy.setRule(null);
    }
    const problem = expectProblem(await asInjected(res), 502, 'upstream_unavailable');
    expect(problem.detail).toMatch(/nothing was charged/);
    // A copy of this request still under way elsewhere may yet settle this authorization: the
    // answer sends the client back with the same signature, never to sign a second payment.
    expect(problem.detail).toMatch(/send the same PAYMENT-SIGNATURE/);
    // The upstream's words (and its address) stay out of the answer.
    expect(JSON.stringify(problem)).not.toMatch(/fetch failed|Bad Gateway|upstream connect|127\.0\.0\.1/);
    expect(res.headers.get('payment-required')).toBeNull();
    expect(await rowOf(sig)).toBeUndefined();
    expect(s.devnet.facilitator.calls.settle).toBe(settle0);
    expect(await s.balanceOf(s.payTo)).toBe(payee0);
    expect(await s.balanceOf(payer)).toBe(payer0);

    // Nothing was used up: once the facilitator is back, the same payment buys the report.
    const ok = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(ok.status).toBe(200);
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + 1000n);
  });

  it('the facilitator\'s own verdict in a 5xx body (isValid: false) stays a 402', async () => {
    const url = `${s.url}/api/quick-check`;
    const sig = await signPayment(s, 4, url);
    proxy.setRule(onVerify({ status: 500, body: JSON.stringify({ isValid: false, invalidReason: 'invalid_exact_evm_signature' }) }));
    let res: Response;
    try {
      res = await fetch(url, { headers: { 'payment-signature': sig } });
    } finally {
      proxy.setRule(null);
    }
    expect(res.status).toBe(402);
    expect(res.headers.get('payment-required')).toBeTruthy();
    expect(await rowOf(sig)).toBeUndefined();
  });
});
