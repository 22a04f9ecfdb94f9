import type { FastifyPluginAsync } from 'fastify';
import type { Static } from 'typebox';
import type { AppDeps } from '../../app.js';
import type { ChainClient } from '../../platform/chain.js';
import type { ReceiptSigner } from '../../platform/receipts.js';
import { PaymentGateway } from '../../platform/x402.js';
import { orderRoutes } from '../orders/routes.js';
import { paymentProof, PaymentProofReport } from './payment-proof.js';
import { PaidReports, type PaidReportDef } from './pipeline.js';
import { quickCheck, QuickCheckReport } from './quick-check.js';
import { PaymentProofRequest } from './schemas.js';
import { tokenRiskReportDef } from '../token-risk/route.js';
import { transactionPreflightReportDef } from '../preflight/route.js';
import { createMarketData } from '../../platform/market/failover.js';

/** The paid reports this build serves; later reports add themselves here. */
export function reportDefinitions(deps: AppDeps, chain: ChainClient, anyChain: ChainClient): PaidReportDef[] {
  // Liquidity evidence for token risk: a fresh provider answer, never the preview's stale fallback.
  const market = deps.market?.data ?? createMarketData(deps.config, deps.clock);
  return [
    tokenRiskReportDef(chain, (address) => market.lookup(address)),
    // Only the transaction and the chain state decide: never reports other customers bought.
    transactionPreflightReportDef(chain, { logBlockRange: deps.config.rpcLogBlockRange }),
    {
      name: 'quickCheck',
      body: null,
      response: QuickCheckReport,
      summary: 'Quick check: chain identity and official USDC contract presence',
      description: 'A fixed check that the node serves chain 8453 and that the official USDC contract has code. Not a token-risk report, simulation, payment proof or contract audit. 502 when the chain cannot be read (nothing charged).',
      // The one report about whichever chain the RPC serves: its client asks no chain id first.
      produce: (_input, now) => quickCheck(anyChain, now),
      readsAnyChain: true,
    },
    {
      name: 'paymentProof',
      body: PaymentProofRequest,
      response: PaymentProofReport,
      summary: 'Payment proof: verify an onchain USDC payment',
      description: `Reads the transaction receipt and decodes every USDC Transfer log (never trusting tx.to or tx.from: relayers and smart wallets send from other addresses). VERIFIED needs a transfer of exactly the expected amount to the expected recipient (and from expectedFrom when given) with at least ${deps.config.minConfirmations} confirmation(s).`,
      example: { chain: 'base', txHash: `0x${'ab'.repeat(32)}`, expectedTo: '0x1111111111111111111111111111111111111111', expectedAmount: '1.5' },
      produce: (input: Static<typeof PaymentProofRequest>, now) => paymentProof(chain, input, deps.config.minConfirmations, now),
    },
  ];
}

/** `chain` and `anyChain` come from buildApp, which makes them once for every feature. */
export const reportRoutes: FastifyPluginAsync<AppDeps & { receipts: ReceiptSigner; chain: ChainClient; anyChain: ChainClient; gateway?: PaymentGateway }> = async (app, deps) => {
  const { chain, anyChain } = deps;
  const defs = reportDefinitions(deps, chain, anyChain);
  const gateway = deps.gateway ?? new PaymentGateway(deps.config, defs.map((d) => ({ name: d.name, input: d.body, ...(d.example ? { example: d.example } : {}) })));
  const reports = new PaidReports({ ...deps, chain, anyChain, gateway });
  for (const def of defs) reports.register(app, def);
  await app.register(orderRoutes, { ...deps, reports, defs });
};
