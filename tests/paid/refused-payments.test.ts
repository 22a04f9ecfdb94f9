// Each payment sent on costs a facilitator call (the operator's facilitator quota pays for it).
// A source whose payments the facilitator keeps refusing (made-up or unfunded authorizations) is
// stopped before the facilitator once it has had REFUSED_PAYMENT_LIMIT refusals in an hour; a
// report it already bought is still delivered.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem } from '../helpers/problems.js';
import { asInjected, signPayment, startHttpProxy, startPaidStack, type PaidStack, type ProxyRule } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack({ config: { rateLimits: true, refusedPaymentLimit: 2 } });
});
afterAll(async () => {
  await s?.close();
});

/** The same authorization with a signature the facilitator refuses (its last byte changed). */
function spoiled(header: string): string {
  const payment = JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as { payload: { signature: string } };
  const sig = payment.payload.signature;
  payment.payload.signature = `${sig.slice(0, -2)}${sig.endsWith('00') ? '01' : '00'}`;
  return Buffer.from(JSON.stringify(payment)).toString('base64');
}

describe('refused payments per source', () => {
  it('after the limit: 429 before any facilitator call, nothing charged; a bought report is still delivered', async () => {
    const url = `${s.url}/api/quick-check`;
    const pay = (signature: string) => fetch(url, { headers: { 'payment-signature': signature } });
    const bought = await signPayment(s, 3, url);
    expect((await pay(bought)).status).toBe(200);

    const verifies = () => s.devnet.facilitator.calls.verify;
    for (let i = 0; i < 2; i++) {
      const before = verifies();
      expectProblem(await asInjected(await pay(spoiled(await signPayment(s, 3, url)))), 402, 'payment_invalid');
      expect(verifies()).toBe(before + 1);
    }

    const before = verifies();
    const payer = s.devnet.accounts[3]!.address;
    const balance = await s.balanceOf(payer);
    for (const signature of [spoiled(await signPayment(s, 3, url)), await signPayment(s, 3, url)]) {
      const res = await pay(signature);
      const problem = expectProblem(await asInjected(res), 429, 'rate_limited');
      expect(problem.title).toBe('Refused payment limit reached');
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    expect(verifies()).toBe(before);
    expect(await s.balanceOf(payer)).toBe(balance);

    // The report bought before is delivered again for its payment, never charged again.
    const again = await pay(bought);
    expect(again.status).toBe(200);
    expect(await s.balanceOf(payer)).toBe(balance);
    // Without a payment the challenge is still answered (it costs no facilitator call).
    expect((await fetch(url)).status).toBe(402);
  });
});

describe('refused payments sent at once', () => {
  let c: PaidStack;
  beforeAll(async () => {
    c = await startPaidStack({ config: { rateLimits: true, refusedPaymentLimit: 2 } });
  });
  afterAll(async () => {
    await c?.close();
  });

  it('cannot all pass the limit: each counts as refused until the facilitator answers', async () => {
    const url = `${c.url}/api/quick-check`;
    const signatures = await Promise.all(Array.from({ length: 20 }, async () => spoiled(await signPayment(c, 4, url))));
    c.devnet.facilitator.setFaults({ delayMs: 300 }); // so that they overlap at the facilitator
    const before = c.devnet.facilitator.calls.verify;
    let statuses: number[];
    try {
      statuses = await Promise.all(signatures.map(async (signature) => (await fetch(url, { headers: { 'payment-signature': signature } })).status));
    } finally {
      c.devnet.facilitator.setFaults({});
    }
    expect(c.devnet.facilitator.calls.verify - before).toBe(2);
    expect(statuses.filter((st) => st === 402)).toHaveLength(2);
    expect(statuses.filter((st) => st === 429)).toHaveLength(18);
  });
});

describe('payments the facilitator did not refuse', () => {
  /** A stack (refused-payment limit 2) whose facilitator calls go through a proxy that `rule` drives. */
  async function behindProxy() {
    const proxy = await startHttpProxy(s.devnet.facilitatorUrl);
    const stack = await startPaidStack({ devnet: s.devnet, config: { rateLimits: true, refusedPaymentLimit: 2, facilitatorUrl: proxy.url } });
    return { stack, proxy, close: async () => (await stack.close(), await proxy.close()) };
  }

  it('do not count as refused when the facilitator could not be reached (502)', async () => {
    const { stack, proxy, close } = await behindProxy();
    try {
      const url = `${stack.url}/api/quick-check`;
      proxy.setRule(async (req, forward) => (req.url === '/verify' ? 'drop' : forward()));
      for (let i = 0; i < 3; i++) {
        const res = await fetch(url, { headers: { 'payment-signature': await signPayment(stack, 3, url) } });
        expectProblem(await asInjected(res), 502, 'upstream_unavailable');
      }
      proxy.setRule(null);
      expect((await fetch(url, { headers: { 'payment-signature': await signPayment(stack, 3, url) } })).status).toBe(200);
    } finally {
      await close();
    }
  });

  it('do not count as refused when the facilitator refused a copy whose payment another copy had just settled', async () => {
    const { stack, proxy, close } = await behindProxy();
    try {
      const url = `${stack.url}/api/quick-check`;
      for (let round = 0; round < 2; round++) {
        const sig = await signPayment(stack, 3, url);
        // The first copy's verify answer is held until the second copy (which found nothing
        // stored yet) asks for its own; that one reaches the facilitator only once the first
        // copy was answered (its payment settled): the facilitator then refuses it as used, and
        // the report it bought is delivered to it.
        let verifies = 0;
        let firstAnswered!: () => void;
        const answered = new Promise<void>((resolve) => (firstAnswered = resolve));
        let secondArrived!: () => void;
        const arrived = new Promise<void>((resolve) => (secondArrived = resolve));
        const rule: ProxyRule = async (req, forward) => {
          if (req.url !== '/verify') return forward();
          if (++verifies === 1) {
            const res = await forward();
            await arrived;
            return res;
          }
          secondArrived();
          await answered;
          return forward();
        };
        proxy.setRule(rule);
        const send = () => fetch(url, { headers: { 'payment-signature': sig } });
        const first = send().then((r) => (firstAnswered(), r));
        const second = send();
        const [a, b] = await Promise.all([first, second]);
        proxy.setRule(null);
        expect(verifies).toBe(2);
        expect([a.status, b.status]).toEqual([200, 200]);
      }
      // Two payments delivered that way are no refusals: a new payment is still taken.
      expect((await fetch(url, { headers: { 'payment-signature': await signPayment(stack, 3, url) } })).status).toBe(200);
    } finally {
      await close();
    }
  });
});
