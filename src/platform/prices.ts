import { parseUsdc } from './money.js';

export const NETWORK = 'eip155:8453';
export const CHAIN_ID = 8453;
/** The official USDC contract on Base. */
export const USDC_ADDRESS = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';

/**
 * The one price table: the catalogue shows it and the payment pipeline charges from it.
 * Prices are per delivered report, INCOMPLETE or negative results included.
 */
export const PAID_REPORTS = {
  tokenRisk: {
    path: '/api/token-risk',
    method: 'POST',
    price: '0.25',
    description: 'Token risk report from onchain evidence: contract, ownership, privileged functions, transfer simulation and liquidity',
  },
  transactionPreflight: {
    path: '/api/transaction-preflight',
    method: 'POST',
    price: '0.05',
    description: 'Simulation of an unsigned transaction: what it would do, with findings',
  },
  paymentProof: {
    path: '/api/verify-payment',
    method: 'POST',
    price: '0.01',
    description: 'Verification of an onchain USDC payment against the expected recipient and amount',
  },
  quickCheck: {
    path: '/api/quick-check',
    method: 'GET',
    price: '0.001',
    description: 'Chain identity and official USDC contract presence; not a risk report, simulation, payment proof or audit',
  },
} as const;

export type PaidReportName = keyof typeof PAID_REPORTS;

export function priceMicro(report: PaidReportName): bigint {
  return parseUsdc(PAID_REPORTS[report].price);
}
