// A Base RPC that answers, but wrongly: garbage is never a verdict, a 400 (the caller's fault), a
// 500 or a crash; it is Base being unreadable (502 for reports, UNKNOWN or 503 for evidence).
import { afterAll, beforeAll, expect, it } from 'vitest';
import { encodeFunctionData, erc20Abi, parseUnits, type Hash, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { devnetClients, USDC_ADDRESS } from '../../src/devnet/index.js';
import { createChainClient } from '../../src/platform/chain.js';
import { paymentProof } from '../../src/features/reports/payment-proof.js';
import { findSettlement } from '../../src/features/reports/settlement-lookup.js';
import { transactionPreflight } from '../../src/features/preflight/preflight.js';
import { jsonRpc } from '../helpers/http.js';
import { ManualClock } from '../../src/platform/clock.js';
import { createTestApp, type TestApp } from '../helpers/app.js';
import { attachPreflight, createChain, createPilotPolicy, settle } from '../api/evidence-helpers.js';
import { paidRowOf, postJson, recordingPayingFetch, startHttpProxy, startPaidStack, eventually, type PaidStack } from '../helpers/paid.js';
import { answer, startRpcProxy, type RpcRule } from '../helpers/rpc-proxy.js';

let s: PaidStack; // paid stack reading Base through `rpc`
let rpc: Awaited<ReturnType<typeof startRpcProxy>>;
let t: TestApp; // evidence chains reading Base through `rpc`
let paid: Hash; // 1.5 USDC from account 1 to account 3
let other: Hash; // 2 USDC from account 2 to account 4
beforeAll(async () => {
  const { startDevnet } = await import('../../src/devnet/index.js');
  const devnet = await startDevnet();
  rpc = await startRpcProxy(devnet.rpcUrl);
  s = await startPaidStack({ devnet, config: { rpcUrls: [rpc.url], rpcTimeoutMs: 2000 } });
  t = await createTestApp({ clock: new ManualClock(new Date(Date.now() - 60_000)), config: { rpcUrls: [rpc.url], rpcTimeoutMs: 2000 } });
  const { walletOf, mined } = devnetClients(devnet.rpcUrl, 'hostile-rpc');
  const pay = async (from: number, to: number, amount: string) => {
    const hash = await walletOf(privateKeyToAccount(devnet.accounts[from]!.privateKey)).writeContract({ address: USDC_ADDRESS, abi: erc20Abi, functionName: 'transfer', args: [devnet.accounts[to]!.address as Hex, parseUnits(amount, 6)] });
    await mined(hash);
    return hash;
  };
  paid = await pay(1, 3, '1.5');
  other = await pay(2, 4, '2');
});
afterAll(async () => {
  await t?.close();
  await s?.close();
  await rpc?.close();
  await s?.devnet.stop();
});
const on = (method: string, make: (call: any, fwd: () => Promise<any>) => any): RpcRule => async (call, fwd) => (call.method === method ? make(call, fwd) : undefined);
const receipt = (f: (r: any) => any) => on('eth_getTransactionReceipt', async (c: any, fwd: any) => answer(c, f((await fwd()).result)));
const acct = (i: number) => s.devnet.accounts[i]!.address;

it.each([
  ['eth_blockNumber "banana"', on('eth_blockNumber', (c: any) => answer(c, 'banana'))],
  ['receipt.logs null', receipt((r) => ({ ...r, logs: null }))],
  ['receipt log data null', receipt((r) => ({ ...r, logs: r.logs.map((l: any) => ({ ...l, data: null })) }))],
])('evidence settlement, RPC answers %s: UNKNOWN (Base could not be read), never 400/500', async (_name, r) => {
  const p = await createPilotPolicy(t);
  const { evidenceChainId } = await createChain(t, p, { recipient: acct(3), amount: '1.5' });
  rpc.setRule(r as RpcRule);
  const res = await settle(t, evidenceChainId, p.agentKey, { txHash: paid });
  rpc.setRule(null);
  expect([200, 502, 503], res.body).toContain(res.statusCode);
});

it.each([
  ['2^31', '0x80000000'],
  ['null', null],
])('evidence settlement, RPC answers a USDC transfer log with logIndex %s: UNKNOWN, the same on SQLite and PostgreSQL (never storage_unavailable, never a MATCH)', async (_name, logIndex) => {
  const p = await createPilotPolicy(t);
  const { evidenceChainId } = await createChain(t, p, { recipient: acct(3), amount: '1.5' });
  rpc.setRule(receipt((r) => ({ ...r, logs: r.logs.map((l: any) => ({ ...l, logIndex })) })));
  const res = await settle(t, evidenceChainId, p.agentKey, { txHash: paid });
  rpc.setRule(null);
  expect(res.statusCode, res.body).toBe(200);
  expect(res.json()).toMatchObject({ result: 'UNKNOWN' });
});

it('paid payment proof, RPC answers receipt.blockNumber "banana" after the payment was verified: 502, not 400', async () => {
  rpc.setRule(receipt((r) => ({ ...r, blockNumber: 'banana' })));
  const res = await recordingPayingFetch(s, 5).fetch(`${s.url}/api/verify-payment`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ chain: 'base', txHash: paid, expectedTo: acct(3), expectedAmount: '1.5' }),
  });
  rpc.setRule(null);
  expect(res.status, await res.text()).toBe(502);
});

it.each([
  ['a receipt of another transaction', async (c: any) => answer(c, (await jsonRpc(s.devnet.rpcUrl, 'eth_getTransactionReceipt', [paid])).result)],
  ['a receipt whose status is neither 0x0 nor 0x1', async (c: any) => answer(c, { ...((await jsonRpc(s.devnet.rpcUrl, 'eth_getTransactionReceipt', [c.params[0]])).result as object), status: '0x2' })],
])('payment proof, the RPC answers %s: Base unreadable (502), never VERIFIED', async (_name, make) => {
  const chain = createChainClient({ rpcUrls: [rpc.url], rpcTimeoutMs: 2000 });
  rpc.setRule(on('eth_getTransactionReceipt', make));
  const asked = { chain: 'base' as const, txHash: other, expectedTo: acct(4), expectedAmount: '2' };
  const report = paymentProof(chain, asked, 1, new Date());
  await expect(report).rejects.toMatchObject({ code: 'upstream_unavailable' });
  rpc.setRule(null);
  expect((await paymentProof(chain, asked, 1, new Date())).verdict.decision).toBe('VERIFIED');
});

it('payment proof, the RPC answers 9 MiB: Base unreadable (502), read no further than 8 MiB', async () => {
  const chain = createChainClient({ rpcUrls: [rpc.url], rpcTimeoutMs: 5000 });
  rpc.setRule(on('eth_getTransactionReceipt', async () => ({ bytes: 9 })));
  await expect(paymentProof(chain, { chain: 'base', txHash: other, expectedTo: acct(4), expectedAmount: '2' }, 1, new Date())).rejects.toMatchObject({ code: 'upstream_unavailable' });
  rpc.setRule(null);
});

it('recovery lookup, the RPC names a head 2^50 blocks on: the search ends maxSpanBlocks after the order\'s block', async () => {
  const chain = createChainClient({ rpcUrls: [rpc.url], rpcTimeoutMs: 2000 });
  const used = `0x${'0'.repeat(63)}1`;
  let logReads = 0;
  rpc.setRule(async (c, fwd) => {
    if (c.method === 'eth_call') return answer(c, used);
    if (c.method === 'eth_getLogs') return (logReads++, answer(c, []));
    if (c.method !== 'eth_getBlockByNumber') return undefined;
    return answer(c, { ...(await fwd()).result, number: '0x4000000000000' });
  });
  const want = { payer: acct(6), nonce: `0x${'44'.repeat(32)}`, payTo: acct(3), amount: 1000n, fromBlock: 1n };
  const found = await findSettlement(chain, want, { logBlockRange: 5000, maxSpanBlocks: 20_000 });
  rpc.setRule(null);
  expect(found).toMatchObject({ found: false });
  expect(logReads).toBe(5); // blocks 1 to 20,001 in ranges of 5,000
});

it('evidence preflight while the provider answers HTTP 403 to everything (quota): 503 and nothing recorded, never an INCOMPLETE record quoting the provider', async () => {
  const p = await createPilotPolicy(t);
  const data = encodeFunctionData({ abi: erc20Abi, functionName: 'transfer', args: [acct(3) as Hex, 1_500_000n] });
  const warm = await createChain(t, p, { recipient: acct(3), amount: '1.5' });
  expect((await attachPreflight(t, warm.evidenceChainId, p.agentKey, { chain: 'base', to: USDC_ADDRESS, from: acct(1), data })).statusCode).toBe(200);
  const { evidenceChainId } = await createChain(t, p, { recipient: acct(3), amount: '1.5' });
  rpc.setRule(async () => ({ status: 403, headers: { 'content-type': 'text/plain' }, body: 'key k_live_SECRET over quota at https://rpc.internal.example/v2/k_live_SECRET' }));
  const res = await attachPreflight(t, evidenceChainId, p.agentKey, { chain: 'base', to: USDC_ADDRESS, from: acct(1), data });
  rpc.setRule(null);
  expect(res.body).not.toContain('k_live_SECRET');
  expect(res.statusCode).toBe(503);
  // Once the provider answers again, the preflight is made (nothing was recorded meanwhile).
  const again = await attachPreflight(t, evidenceChainId, p.agentKey, { chain: 'base', to: USDC_ADDRESS, from: acct(1), data });
  expect(again.statusCode).toBe(200);
  expect(again.json()).toMatchObject({ replayed: false, preflight: { verdict: { decision: 'ALLOW' } } });
});

it('recovery, the RPC\'s eth_getLogs ignores the topic filter (another USDC log first): the settlement is still found, never "nothing was charged"', async () => {
  const held: Array<() => Promise<unknown>> = [];
  const fac = await startHttpProxy(s.devnet.facilitatorUrl, async (req, forward) => {
    if (req.url !== '/settle') return forward();
    held.push(forward);
    return { status: 200, body: JSON.stringify({ success: false, errorReason: 'invalid_exact_evm_transaction_failed', transaction: '', network: 'eip155:8453' }) };
  });
  const h = await startPaidStack({ devnet: s.devnet, database: s.t.database, config: { facilitatorUrl: fac.url, rpcUrls: [rpc.url] } });
  try {
    const payer = acct(6);
    const before = await s.balanceOf(payer);
    await fetch(s.devnet.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'anvil_mine', params: ['0x1'] }) });
    const res = await recordingPayingFetch(h, 6).fetch(`${h.url}/api/quick-check`);
    expect(res.status).toBe(202);
    const pending = await res.json();
    const { walletOf, mined } = devnetClients(s.devnet.rpcUrl, 'other');
    await mined(await walletOf(privateKeyToAccount(s.devnet.accounts[7]!.privateKey)).writeContract({ address: USDC_ADDRESS, abi: erc20Abi, functionName: 'transfer', args: [acct(8) as Hex, 1_000_000n] }));
    await held[0]!(); // the settlement lands after someone else's USDC transfer
    await eventually(async () => (await s.balanceOf(payer)) === before - 1000n, 'the settlement on chain');
    rpc.setRule(on('eth_getLogs', async (c: any) => {
      const [f] = c.params;
      const r = await fetch(s.devnet.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: c.id, method: 'eth_getLogs', params: [{ address: f.address, fromBlock: f.fromBlock, toBlock: f.toBlock }] }) });
      return JSON.stringify(await r.json());
    }));
    const restored = await postJson(`${h.url}/api/orders/recover`, { id: pending.orderId, key: pending.recoveryKey });
    rpc.setRule(null);
    expect(restored.status, await restored.text()).toBe(200);
  } finally {
    await h.close();
    await fac.close();
  }
});

const simulatedLogOf = (log: unknown): RpcRule => async (c, fwd) => {
  if (c.method !== 'eth_simulateV1') return undefined;
  const r = (await fwd()).result;
  r[0].calls[2].logs = [log]; // the transaction's: [context, gas funding, transaction, …]
  return answer(c, r);
};

it.each([
  ['topics null', { address: USDC_ADDRESS, topics: null, data: '0x' }],
  ['a topic that is no 32-byte word', { address: USDC_ADDRESS, topics: ['0x12'], data: '0x' }],
  ['data that is not hex', { address: USDC_ADDRESS, topics: [], data: 'banana' }],
])('preflight, eth_simulateV1 answers a log with %s: Base unreadable (502 paid, 503 evidence), never 500', async (_name, log) => {
  const chain = createChainClient({ rpcUrls: [rpc.url], rpcTimeoutMs: 2000 });
  const data = encodeFunctionData({ abi: erc20Abi, functionName: 'transfer', args: [acct(3) as Hex, 1_500_000n] });
  const p = await createPilotPolicy(t);
  const { evidenceChainId } = await createChain(t, p, { recipient: acct(3), amount: '1.5' });
  rpc.setRule(simulatedLogOf(log));
  const report = transactionPreflight(chain, { chain: 'base', to: USDC_ADDRESS, from: acct(1), data }, new Date());
  await expect(report).rejects.toMatchObject({ code: 'upstream_unavailable' });
  const res = await attachPreflight(t, evidenceChainId, p.agentKey, { chain: 'base', to: USDC_ADDRESS, from: acct(1), data });
  rpc.setRule(null);
  expect(res.statusCode).toBe(503);
});
