// POST /api/transaction-preflight end to end: paid with the official x402 client on the devnet,
// one real transaction per finding (the cases of tests/helpers/preflight-scenarios.ts), and
// bad input refused before any payment is asked for. Runs on SQLite and on PostgreSQL.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { encodeFunctionData, getAddress } from 'viem';
import { fiatTokenAbi, USDC_ADDRESS } from '../../src/devnet/index.js';
import { preflightInputDigest, transactionPreflight, type PreflightInput } from '../../src/features/preflight/preflight.js';
import { createChainClient } from '../../src/platform/chain.js';
import { PreflightReport } from '../../src/features/preflight/schemas.js';
import { digestOf } from '../../src/platform/canonical.js';
import { HUGE_DECIMALS, placeHugeDecimalsToken } from '../helpers/odd-token.js';
import { startPaidStack, type PaidStack } from '../helpers/paid.js';
import { expectMatchesSchema } from '../helpers/schema.js';
import { PREFLIGHT_CASE_NAMES, preflightCase, preparePreflightScenarios, type Scenarios } from '../helpers/preflight-scenarios.js';

const PATH = '/api/transaction-preflight';
const PRICE = 50_000n; // 0.05 USDC
const PAYER = 8;
let s: PaidStack;
let sc: Scenarios;

beforeAll(async () => {
  s = await startPaidStack();
  sc = await preparePreflightScenarios(s.devnet);
}, 120_000);
afterAll(async () => {
  await s?.close();
});

const post = (body: unknown, f: typeof fetch = fetch) =>
  f(`${s.url}${PATH}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('paid transaction preflight', () => {
  it('answers 402 with a 0.05 USDC challenge and charges nothing', async () => {
    const before = await s.balanceOf(s.devnet.accounts[PAYER]!.address);
    const res = await post(preflightCase('plain USDC transfer', sc).input);
    expect(res.status).toBe(402);
    const challenge = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(challenge.accepts[0]).toMatchObject({ scheme: 'exact', network: 'eip155:8453', asset: USDC_ADDRESS, amount: PRICE.toString(), payTo: s.payTo });
    expect(await s.balanceOf(s.devnet.accounts[PAYER]!.address)).toBe(before);
  });

  it('a plain USDC transfer, paid: ALLOW with its asset changes, a receipt naming the input, 0.05 USDC settled', async () => {
    const payee0 = await s.balanceOf(s.payTo);
    const input = preflightCase('plain USDC transfer', sc).input;
    const res = await post(input, s.payingFetch(PAYER));
    expect(res.status).toBe(200);
    const { receipt, ...report } = await res.json();
    expectMatchesSchema(PreflightReport, report);
    expect(report.verdict).toEqual({ decision: 'ALLOW', score: 0, confidence: 'high' });
    expect(report.destination).toMatchObject({ address: USDC_ADDRESS, kind: 'contract', knownAs: 'USDC', tokenInfo: { symbol: 'USDC', decimals: 6 } });
    expect(report.simulation.assetChanges).toEqual([
      { standard: 'erc20', token: USDC_ADDRESS, symbol: 'USDC', decimals: 6, from: sc.who.sender, to: sc.who.recipient, amount: '1.5', rawAmount: '1500000' },
    ]);
    expect(report.findings).toEqual([]);
    expect(report.inputDigest).toBe(preflightInputDigest(input as PreflightInput));
    expect(decodePaymentResponseHeader(res.headers.get('payment-response')!).success).toBe(true);
    expect(receipt.subject).toMatchObject({ path: PATH, price: '0.05', inputDigest: digestOf({ path: PATH, input }) });
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + PRICE);
  });

  it.each(PREFLIGHT_CASE_NAMES)('%s', async (name) => {
    const c = preflightCase(name, sc);
    const res = await post(c.input, s.payingFetch(PAYER));
    expect(res.status, await res.clone().text()).toBe(200);
    const { receipt, ...report } = await res.json();
    expectMatchesSchema(PreflightReport, report);
    expect(report.findings.map((f: { code: string }) => f.code)).toEqual(c.codes);
    expect(report.verdict.decision).toBe(c.decision);
    if (c.revertReason) expect(report.simulation.revertReason).toBe(c.revertReason);
    expect(receipt.subject.price).toBe('0.05');
    // The HTTP serialisation keeps everything the producer said (evidence, decoded arguments).
    if (c.input.from) {
      const direct = await transactionPreflight(createChainClient({ rpcUrls: [s.devnet.rpcUrl], rpcTimeoutMs: 5000 }), c.input as PreflightInput, s.t.clock.now());
      // Block number and gas may move between the two (Uniswap's price accumulators cost gas only
      // in a new block), and so may the block time a revert's arguments carry (VaultLocked(now +
      // 1 day)): of the revert data, only the error selector must agree.
      const steady = (r: typeof direct) => ({
        ...r,
        simulation: { ...r.simulation, blockNumber: 0, gasUsed: 0, revertData: r.simulation.revertData?.slice(0, 10) ?? null },
      });
      expect(steady(report)).toEqual(steady(direct));
    }
  });
});

describe('hostile token metadata', () => {
  it('a token whose decimals() answers 2^32 gets a delivered report in base units, not a 500', async () => {
    const token = '0x00000000000000000000000000000000dec1dec1';
    await placeHugeDecimalsToken(s.devnet.rpcUrl, token);
    const from = s.devnet.accounts[2]!.address;
    const data = encodeFunctionData({ abi: fiatTokenAbi, functionName: 'transfer', args: [s.devnet.accounts[3]!.address, 5n] });
    const res = await post({ chain: 'base', to: token, from, data }, s.payingFetch(PAYER));
    expect(res.status, await res.clone().text()).toBe(200);
    const { receipt, ...report } = await res.json();
    expectMatchesSchema(PreflightReport, report);
    expect(receipt.subject.price).toBe('0.05');
    // Its name() and symbol() do not decode as strings and its decimals are out of range: nothing is known of it.
    expect(report.destination.tokenInfo).toBeUndefined();
    // The Transfer it emits (caller to caller, of 2^32) is shown in base units.
    expect(report.simulation.assetChanges).toEqual([
      expect.objectContaining({ standard: 'erc20', token: getAddress(token), decimals: null, from, to: from, amount: HUGE_DECIMALS.toString(), rawAmount: HUGE_DECIMALS.toString() }),
    ]);
  });
});

describe('bad input is 400 and asks for no payment', () => {
  const to = '0x1111111111111111111111111111111111111111';
  const bad: Record<string, unknown> = {
    'odd-length data': { chain: 'base', to, data: '0xabc' },
    'data without 0x': { chain: 'base', to, data: 'abcd' },
    'non-hex data': { chain: 'base', to, data: '0xzz' },
    'non-digit valueWei': { chain: 'base', to, valueWei: '1e18' },
    'negative valueWei': { chain: 'base', to, valueWei: '-1' },
    'fractional valueWei': { chain: 'base', to, valueWei: '1.5' },
    'numeric valueWei': { chain: 'base', to, valueWei: 1 },
    'valueWei above 2^256 - 1': { chain: 'base', to, valueWei: (2n ** 256n).toString() },
    'wrong chain': { chain: 'ethereum', to },
    'missing chain': { to },
    'missing to': { chain: 'base' },
    'short address': { chain: 'base', to: '0x1234' },
    'bad from': { chain: 'base', to, from: 'alice' },
    'another property': { chain: 'base', to, gas: '21000' },
  };
  it('valueWei of exactly 2^256 - 1 is accepted (and answered with a 402 challenge)', async () => {
    const res = await post({ chain: 'base', to, valueWei: (2n ** 256n - 1n).toString() }, fetch);
    expect(res.status).toBe(402);
  });

  it.each(Object.keys(bad))('%s', async (name) => {
    const res = await post(bad[name], s.payingFetch(PAYER));
    expect(res.status).toBe(400);
    expect(res.headers.get('payment-required')).toBeNull();
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await res.json()).toMatchObject({ status: 400, code: 'invalid_request' });
  });
});
