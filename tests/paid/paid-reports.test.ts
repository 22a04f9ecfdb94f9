import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { USDC_ADDRESS } from '../../src/devnet/index.js';
import { startPaidStack, type PaidStack } from '../helpers/paid.js';
import { verifyReceiptWithCli } from '../helpers/receipt-cli.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
});
afterAll(async () => {
  await s?.close();
});

describe('paid reports over x402 with the official client', () => {
  it('answers 402 with a v2 challenge for the quick check and charges nothing', async () => {
    const before = await s.balanceOf(s.devnet.accounts[1]!.address);
    const res = await fetch(`${s.url}/api/quick-check`);
    expect(res.status).toBe(402);
    const challenge = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(challenge.x402Version).toBe(2);
    expect(challenge.accepts[0]).toMatchObject({
      scheme: 'exact',
      network: 'eip155:8453',
      asset: USDC_ADDRESS,
      amount: '1000',
      payTo: s.payTo,
      extra: { name: 'USD Coin', version: '2' },
    });
    expect(challenge.extensions?.bazaar).toBeDefined();
    expect(await s.balanceOf(s.devnet.accounts[1]!.address)).toBe(before);
  });

  it('pays for a quick check, then proves that very payment with a paid payment proof', async () => {
    const pay = s.payingFetch(1);
    const payee0 = await s.balanceOf(s.payTo);
    const res = await pay(`${s.url}/api/quick-check`);
    expect(res.status).toBe(200);
    const report = await res.json();
    expect(report).toMatchObject({ network: 'eip155:8453', status: 'PASS', checks: { chainId: { expected: 8453, observed: 8453, match: true }, usdcContract: { codePresent: true } } });
    const settlement = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    expect(settlement.success).toBe(true);
    expect(report.receipt.subject).toMatchObject({ path: '/api/quick-check', price: '0.001', settlementTransaction: settlement.transaction, network: 'eip155:8453' });
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + 1000n);
    // The receipt verifies with the JWKS alone, for the answer as paid and as a recovery gives
    // it ({ report, receipt }), and binds the report: a changed one fails.
    const jwks = `${s.url}/.well-known/jwks.json`;
    const { receipt, ...content } = report;
    for (const answer of [report, { report: content, receipt }]) expect((await verifyReceiptWithCli(answer, jwks)).code).toBe(0);
    const changed = await verifyReceiptWithCli({ ...report, status: 'FAIL' }, jwks);
    expect(changed.code).toBe(1);
    expect(changed.err).toMatch(/the report does not match the reportDigest its receipt signs/);

    const proof = await pay(`${s.url}/api/verify-payment`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ chain: 'base', txHash: settlement.transaction, expectedTo: s.payTo, expectedAmount: '0.001' }),
    });
    expect(proof.status).toBe(200);
    const body = await proof.json();
    expect(body.verdict).toEqual({ decision: 'VERIFIED', verified: true });
    expect(await s.balanceOf(s.payTo)).toBe(payee0 + 1000n + 10_000n);
  });

  it('asks no payment for invalid input', async () => {
    const res = await fetch(`${s.url}/api/verify-payment`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ chain: 'base', txHash: '0x12', expectedTo: s.payTo, expectedAmount: '1' }),
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('payment-required')).toBeNull();
  });
});
