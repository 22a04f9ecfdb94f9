// Two copies of one payment (a client's retry at another instance behind the load balancer, the
// first answer lost): one stores its report and settles; the other passed verify before that
// settle landed, and then could not read the chain for its own copy of the report. The payment
// has bought this very report: the second copy must deliver it (or say it is pending), never
// answer "nothing was charged" or an error that leads the client to sign a second payment.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { loggerOptions } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { eventually, signPayment, startPaidStack, type PaidStack } from '../helpers/paid.js';
import { startRpcProxy } from '../helpers/rpc-proxy.js';

let s: PaidStack; // healthy instance
let rpc: Awaited<ReturnType<typeof startRpcProxy>>;
let b: PaidStack; // a second instance on the same database, whose RPC the test holds and then fails
/** b's log lines at warn and above. */
const bLog: string[] = [];
beforeAll(async () => {
  const stream = new PassThrough();
  stream.on('data', (c: Buffer) => bLog.push(...c.toString('utf8').split('\n').filter(Boolean)));
  s = await startPaidStack();
  rpc = await startRpcProxy(s.devnet.rpcUrl);
  b = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { rpcUrls: [rpc.url], rpcTimeoutMs: 5000 }, logger: loggerOptions(testConfig({ logLevel: 'warn' }), stream) });
});
afterAll(async () => {
  await b?.close();
  await rpc?.close();
  await s?.close();
});

const CASES = [
  // The read of the head block right after verify (where the settlement search will start).
  { what: 'the head-block read after verify', method: 'eth_blockNumber', path: '/api/quick-check', payer: 1, price: 1_000n, body: undefined },
  // The report itself (the payment proof reads the transaction's receipt).
  {
    what: 'the report',
    method: 'eth_getTransactionReceipt',
    path: '/api/verify-payment',
    payer: 2,
    price: 10_000n,
    body: { chain: 'base', txHash: `0x${randomBytes(32).toString('hex')}`, expectedTo: '0x1111111111111111111111111111111111111111', expectedAmount: '0.01' },
  },
] as const;

it.each(CASES)('a copy whose $what fails after another copy bought the report delivers that report, charged once', async ({ method, path, payer, price, body }) => {
  const init = (url: string, sig?: string): [string, RequestInit] => [
    url,
    body
      ? { method: 'POST', headers: { 'content-type': 'application/json', ...(sig ? { 'payment-signature': sig } : {}) }, body: JSON.stringify(body) }
      : { headers: sig ? { 'payment-signature': sig } : {} },
  ];
  const sig = await signPayment(s, payer, ...init(`${s.url}${path}`));
  const from = s.devnet.accounts[payer]!.address;
  const [payee0, payer0] = [await s.balanceOf(s.payTo), await s.balanceOf(from)];

  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let reached = false;
  rpc.setRule(async (call) => {
    if (call.method !== method) return undefined;
    reached = true;
    await held;
    return { status: 503, body: 'unavailable' };
  });
  try {
    const second = fetch(...init(`${b.url}${path}`, sig));
    await eventually(async () => reached, `the second copy at ${method}`);
    // Meanwhile the first copy (at the healthy instance) stores, settles and answers.
    const first = await fetch(...init(`${s.url}${path}`, sig));
    expect(first.status).toBe(200);
    const report = await first.json();
    release();
    bLog.length = 0;
    const res = await second;
    const answer = await res.json();
    // The payment bought this report: the copy delivers it; never "nothing was charged".
    expect(res.status, JSON.stringify(answer)).toBe(200);
    expect(answer).toEqual(report);
    // Delivered, and that is all: no failure raised after the report went out (which the
    // service would log as an error of a request that in fact succeeded).
    await new Promise((r) => setImmediate(r));
    expect(bLog.filter((line) => (JSON.parse(line) as { level: number }).level >= 50)).toEqual([]);
  } finally {
    release();
    rpc.setRule(null);
  }
  expect(await s.balanceOf(s.payTo)).toBe(payee0 + price);
  expect(await s.balanceOf(from)).toBe(payer0 - price);
});
