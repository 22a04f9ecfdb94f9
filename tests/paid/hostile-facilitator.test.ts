// What the service takes from the facilitator's word: its settlement only as deep as
// MIN_CONFIRMATIONS asks, never its payer, and its prose never passed on to callers.
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { jsonRpc } from '../helpers/http.js';
import { devnetRpc, eventually, paidRowOf, recordingPayingFetch, recoverOrder, signPayment, startHttpProxy, startPaidStack, type PaidStack, type ProxyRule } from '../helpers/paid.js';

let s: PaidStack; // honest facilitator, MIN_CONFIRMATIONS=5
let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
let h: PaidStack; // same devnet and database, the facilitator behind `proxy`, MIN_CONFIRMATIONS=1
let h5: PaidStack; // the same with MIN_CONFIRMATIONS=5
beforeAll(async () => {
  s = await startPaidStack({ config: { minConfirmations: 5 } });
  proxy = await startHttpProxy(s.devnet.facilitatorUrl);
  h = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: proxy.url } });
  h5 = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: proxy.url, minConfirmations: 5 } });
});
afterAll(async () => {
  await h5?.close();
  await h?.close();
  await proxy?.close();
  await s?.close();
});
const rule = (r: ProxyRule | null) => proxy.setRule(r);
const rawGet = (url: string, headers: Record<string, string>) =>
  new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
    const r = httpRequest(url, { headers, maxHeaderSize: 10_000_000 }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: b }));
    });
    r.on('error', reject);
    r.end();
  });

it('MIN_CONFIRMATIONS=5: a settled report waits (202) at 1 confirmation and is released once the settlement is 5 deep', async () => {
  const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
  const res = await pay(`${s.url}/api/quick-check`);
  const row = await paidRowOf(s, signatures.at(-1)!);
  const head = BigInt((await jsonRpc(s.devnet.rpcUrl, 'eth_blockNumber', [])).result as string);
  const mined = BigInt(((await jsonRpc(s.devnet.rpcUrl, 'eth_getTransactionReceipt', [row!.settle_tx])).result as { blockNumber: string }).blockNumber);
  expect(head - mined + 1n).toBe(1n);
  expect(res.status).toBe(202);
  const pending = await res.json();
  expect(pending).toMatchObject({ status: 'pending', reason: expect.stringContaining('1 confirmation') });
  // 4 deep is one short: still pending, nothing released.
  await devnetRpc(s.devnet, 'anvil_mine', ['0x3']);
  const early = await recoverOrder(s, pending);
  expect(early.status).toBe(202);
  expect(early.body).toMatchObject({ status: 'pending', reason: expect.stringContaining('4 confirmation') });
  await devnetRpc(s.devnet, 'anvil_mine', ['0x1']);
  const restored = await recoverOrder(s, pending);
  expect(restored.status).toBe(200);
  expect(restored.body).toMatchObject({ receipt: { subject: { settlementTransaction: row!.settle_tx } } });
});

it('MIN_CONFIRMATIONS=5, /settle says success in a transaction Base does not have: pending (202), no report, nothing charged', async () => {
  const payer = s.devnet.accounts[2]!.address;
  const before = await s.balanceOf(payer);
  rule(async (req, forward) =>
    req.url === '/settle' ? { status: 200, body: JSON.stringify({ success: true, transaction: `0x${'ab'.repeat(32)}`, network: 'eip155:8453', payer }) } : forward(),
  );
  const res = await recordingPayingFetch(h5, 2).fetch(`${h5.url}/api/quick-check`);
  rule(null);
  expect(await s.balanceOf(payer)).toBe(before);
  expect(res.status).toBe(202);
  expect(await res.json()).not.toHaveProperty('report');
});

it('/settle success naming another payer: the signed receipt and the stored row name the authorization\'s payer', async () => {
  const payer = s.devnet.accounts[3]!.address;
  rule(async (req, forward) => {
    if (req.url !== '/settle') return forward();
    const real = await forward();
    return { ...real, body: JSON.stringify({ ...JSON.parse(real.body), payer: '0x000000000000000000000000000000000000dEaD' }) };
  });
  const { fetch: pay, signatures } = recordingPayingFetch(h, 3);
  const res = await pay(`${h.url}/api/quick-check`);
  rule(null);
  expect(res.status).toBe(200);
  const body = await res.json();
  expect(body.receipt.subject.payer.toLowerCase()).toBe(payer.toLowerCase());
  expect((await paidRowOf(h, signatures.at(-1)!))!.payer.toLowerCase()).toBe(payer.toLowerCase());
});

it('/settle refusal in prose (a URL with a key, 5 KB): the 202 says the reason is not an x402 code, and quotes none of it', async () => {
  rule(async (req, forward) =>
    req.url === '/settle'
      ? { status: 400, body: JSON.stringify({ success: false, errorReason: `upstream https://rpc.example/v2/SECRETKEY?apikey=hunter2 ${'x'.repeat(5000)}`, transaction: '', network: 'eip155:8453' }) }
      : forward(),
  );
  const res = await recordingPayingFetch(h, 4).fetch(`${h.url}/api/quick-check`);
  rule(null);
  const text = await res.text();
  expect(res.status).toBe(202);
  expect(text).not.toContain('hunter2');
  expect(text).toContain('not an x402 code');
  expect(text.length).toBeLessThan(2000);
});

it('/verify refusal in prose (a URL with a key, 20 KB): PAYMENT-REQUIRED carries it redacted and short, readable by x402 clients', async () => {
  rule(async (req, forward) =>
    req.url === '/verify' ? { status: 200, body: JSON.stringify({ isValid: false, invalidReason: `bad https://f.internal/x402?api_key=AKIASECRET ${'y'.repeat(20_000)}` }) } : forward(),
  );
  const sig = await signPayment(h, 6, `${h.url}/api/quick-check`);
  const res = await rawGet(`${h.url}/api/quick-check`, { 'payment-signature': sig });
  rule(null);
  expect(res.status).toBe(402);
  expect(res.body).not.toContain('AKIASECRET');
  const header = String(res.headers['payment-required']);
  const required = decodePaymentRequiredHeader(header);
  expect(required.error).toMatch(/^bad <url> /);
  expect(required.accepts[0]).toMatchObject({ network: 'eip155:8453' });
  expect(header.length).toBeLessThan(8192);
});

it('/supported answering 429 with Retry-After 30: an unpaid request gets its 502 within FACILITATOR_TIMEOUT_MS, not after the SDK\'s retries', async () => {
  const limited = await startHttpProxy(s.devnet.facilitatorUrl, async (req, forward) =>
    req.url === '/supported' ? { status: 429, headers: { 'content-type': 'application/json', 'retry-after': '30' }, body: '{"error":"rate limited"}' } : forward(),
  );
  const stack = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: limited.url, facilitatorTimeoutMs: 2000 } });
  try {
    const started = Date.now();
    const res = await fetch(`${stack.url}/api/quick-check`);
    expect(res.status).toBe(502);
    expect(Date.now() - started).toBeLessThan(15_000);
  } finally {
    await stack.close();
    await limited.close();
  }
});

it('a replay of the PAYMENT-SIGNATURE more than RECOVERY_TTL_SECONDS blocks later still finds the settlement that landed after a refusal', async () => {
  const held: Array<() => Promise<unknown>> = [];
  const fac = await startHttpProxy(s.devnet.facilitatorUrl, async (req, forward) => {
    if (req.url !== '/settle') return forward();
    held.push(forward);
    return { status: 200, body: JSON.stringify({ success: false, errorReason: 'invalid_exact_evm_transaction_failed', transaction: '', network: 'eip155:8453' }) };
  });
  const h = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: fac.url, recoveryTtlSeconds: 30 } });
  try {
    const payer = s.devnet.accounts[6]!.address;
    const before = await s.balanceOf(payer);
    const url = `${h.url}/api/quick-check`;
    const sig = await signPayment(h, 6, url);
    const first = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(first.status).toBe(202);
    await held[0]!(); // the settlement lands after all
    await eventually(async () => (await s.balanceOf(payer)) === before - 1000n, 'the settlement on chain');
    fac.setRule(null); // the facilitator is honest again
    await devnetRpc(s.devnet, 'anvil_mine', ['0x28']); // 40 blocks (80 s of Base)
    const again = await fetch(url, { headers: { 'payment-signature': sig } });
    const text = await again.text();
    expect(again.status, text).toBe(200);
    expect((await paidRowOf(h, sig))?.status).toBe('settled');
  } finally {
    await h.close();
    await fac.close();
  }
});
