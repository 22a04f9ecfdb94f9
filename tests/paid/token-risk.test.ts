// Every zoo token through the paid token-risk report, paid with the official x402 client
// (@x402/fetch) through the devnet's facilitator, exactly as a caller would.
import { encodeFunctionData, parseAbi } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { fiatTokenAbi, startDevnet, USDC_ADDRESS, type Devnet, type ZooBehaviour } from '../../src/devnet/index.js';
import { startPaidStack, type PaidStack } from '../helpers/paid.js';

const PAYER = 2;
const PRICE_MICRO = 250_000n;
let devnet: Devnet;
let s: PaidStack;

beforeAll(async () => {
  devnet = await startDevnet({ zoo: true });
  s = await startPaidStack({ devnet });
});
afterAll(async () => {
  await s?.close();
  await devnet?.stop();
});

const post = (f: typeof fetch, body: unknown) =>
  f(`${s.url}/api/token-risk`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** Pays for one report and checks the charge, the settlement header and the receipt. */
async function paidReport(address: string) {
  const payer = s.devnet.accounts[PAYER]!.address;
  const [payerBefore, payeeBefore] = await Promise.all([s.balanceOf(payer), s.balanceOf(s.payTo)]);
  const res = await post(s.payingFetch(PAYER), { chain: 'base', address });
  expect(res.status).toBe(200);
  const report = await res.json();
  const settlement = decodePaymentResponseHeader(res.headers.get('payment-response')!);
  expect(settlement.success).toBe(true);
  expect(report.receipt.subject).toMatchObject({ path: '/api/token-risk', price: '0.25', settlementTransaction: settlement.transaction, network: 'eip155:8453' });
  expect(await s.balanceOf(payer)).toBe(payerBefore - PRICE_MICRO);
  expect(await s.balanceOf(s.payTo)).toBe(payeeBefore + PRICE_MICRO);
  return report;
}

const findingOf = (report: any, code: string) =>
  Object.values(report.risk.breakdown as Record<string, { findings: Array<{ code: string; severity: string; evidence: Record<string, unknown> }> }>)
    .flatMap((b) => b.findings)
    .find((f) => f.code === code);

describe('POST /api/token-risk (0.25 USDC, official x402 client)', () => {
  it('answers 402 with a 0.25 USDC challenge and charges nothing', async () => {
    const res = await post(fetch, { chain: 'base', address: devnet.zoo!.tokens.honest });
    expect(res.status).toBe(402);
    const challenge = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(challenge.accepts[0]).toMatchObject({ scheme: 'exact', network: 'eip155:8453', asset: USDC_ADDRESS, amount: '250000', payTo: s.payTo });
  });

  it.each([
    [{ chain: 'base', address: '0x1234' }],
    [{ chain: 'ethereum', address: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' }],
    [{ chain: 'base', address: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913', extra: true }],
  ])('asks no payment for invalid input %o', async (body) => {
    const res = await post(fetch, body);
    expect(res.status).toBe(400);
    expect(res.headers.get('payment-required')).toBeNull();
  });

  const expected: Record<ZooBehaviour, { decision: string; level: string; reasons?: string[] }> = {
    honest: { decision: 'ALLOW', level: 'low', reasons: [] },
    mintable: { decision: 'WARN', level: 'high' },
    pausable: { decision: 'WARN', level: 'high' },
    blacklist: { decision: 'WARN', level: 'high' },
    proxy: { decision: 'WARN', level: 'high' },
    'fee-on-transfer': { decision: 'WARN', level: 'high' },
    honeypot: { decision: 'BLOCK', level: 'critical', reasons: ['sell_reverts'] },
    'no-liquidity': { decision: 'INCOMPLETE', level: 'unknown', reasons: ['transferSimulation_unavailable'] },
  };
  const decisive: Partial<Record<ZooBehaviour, string>> = {
    mintable: 'mint_function',
    pausable: 'pause_function',
    blacklist: 'blacklist_function',
    proxy: 'upgradeable_proxy',
    'fee-on-transfer': 'sell_tax',
  };

  it.each(Object.keys(expected) as ZooBehaviour[])('%s gets the verdict its behaviour deserves', async (behaviour) => {
    const report = await paidReport(devnet.zoo!.tokens[behaviour]);
    expect(report.verdict).toMatchObject(expected[behaviour]);
    expect(report.token.address).toBe(devnet.zoo!.tokens[behaviour]);
    expect(Object.keys(report.risk.coverage)).toContain('ownership');
    expect(Object.keys(report.risk.breakdown)).toContain('ownership');
    if (decisive[behaviour]) expect(report.verdict.reasons).toContain(decisive[behaviour]);
    if (behaviour === 'no-liquidity') expect(report.verdict.score).toBeNull();
    else expect(report.verdict.score).toEqual(expect.any(Number));
  });

  it('fee-on-transfer: at least WARN, with the measured 10% tax in the findings', async () => {
    const report = await paidReport(devnet.zoo!.tokens['fee-on-transfer']);
    expect(['WARN', 'BLOCK']).toContain(report.verdict.decision);
    expect(findingOf(report, 'buy_tax')!.evidence.taxPercent).toBe('10.00');
    expect(findingOf(report, 'transfer_tax')!.evidence.taxPercent).toBe('10.00');
    expect(report.simulation.transfer.taxPercent).toBe('10.00');
  });

  it('an address without code is a delivered (and charged) BLOCK', async () => {
    const report = await paidReport(devnet.accounts[4]!.address);
    expect(report.verdict).toEqual({ decision: 'BLOCK', level: 'critical', score: 80, confidence: 'high', reasons: ['no_contract_code'] });
    expect(report.token.codePresent).toBe(false);
  });
});

// The paid preflight is a function of the transaction and the chain state only: token-risk
// reports other customers bought (possibly days ago, possibly about a wallet or a router that is
// no token at all) neither decide nor colour its verdict.
describe('token-risk reports bought by others do not change a paid preflight', () => {
  const OTHER = 7; // the customer asking for the preflight; PAYER buys the token-risk reports
  const preflight = async (input: Record<string, unknown>) => {
    const res = await s.payingFetch(OTHER)(`${s.url}/api/transaction-preflight`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ chain: 'base', ...input }),
    });
    expect(res.status).toBe(200);
    const report = (await res.json()) as { verdict: { decision: string }; findings: Array<{ code: string }> };
    return { decision: report.verdict.decision, codes: report.findings.map((f) => f.code) };
  };
  const transfer = (to: string, amount: bigint) =>
    encodeFunctionData({ abi: fiatTokenAbi, functionName: 'transfer', args: [to as `0x${string}`, amount] });

  it.each([
    ['a plain USDC payment (token risk of USDC: WARN)', () => ({ to: USDC_ADDRESS, from: s.devnet.accounts[OTHER]!.address, data: transfer(s.devnet.accounts[3]!.address, 1_500_000n) }), { decision: 'ALLOW', codes: [] }],
    ['0.001 ETH to a wallet (token risk of a wallet: BLOCK, no_contract_code)', () => ({ to: s.devnet.accounts[4]!.address, from: s.devnet.accounts[OTHER]!.address, valueWei: '1000000000000000' }), { decision: 'ALLOW', codes: [] }],
    ['a swap through the router (token risk of the router: BLOCK, not_erc20)', () => ({
      to: devnet.zoo!.router,
      from: s.devnet.accounts[OTHER]!.address,
      valueWei: '10000000000000000',
      data: encodeFunctionData({
        abi: parseAbi(['function swapExactETHForTokens(uint256,address[],address,uint256) payable returns (uint256[])']),
        functionName: 'swapExactETHForTokens',
        args: [0n, [devnet.zoo!.weth, USDC_ADDRESS], s.devnet.accounts[OTHER]!.address, 2n ** 40n],
      }),
    }), null],
    ['a transfer of the honeypot token (token risk: BLOCK, sell_reverts)', () => ({ to: devnet.zoo!.tokens.honeypot, from: s.devnet.accounts[PAYER]!.address, data: transfer(s.devnet.accounts[3]!.address, 1n) }), null],
  ] as const)('%s', async (_name, input, expected) => {
    const tx = input();
    const before = await preflight(tx);
    await paidReport(tx.to);
    const after = await preflight(tx);
    expect(after).toEqual(before);
    expect(after.codes.filter((c) => c.startsWith('token_risk'))).toEqual([]);
    if (expected) expect(after).toEqual(expected);
  });
});
