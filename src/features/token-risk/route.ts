import type { Static } from 'typebox';
import type { ChainClient } from '../../platform/chain.js';
import { USDC_ADDRESS } from '../../platform/prices.js';
import type { PaidReportDef } from '../reports/pipeline.js';
import { TokenAddressRequest } from '../tokens/schemas.js';
import type { TokenMarketLookup } from './market.js';
import { tokenRisk, TOKEN_RISK_DESCRIPTION } from './report.js';
import { TokenRiskReport } from './schemas.js';

/**
 * POST /api/token-risk for the paid-report pipeline. `market` is the fresh market-data lookup
 * for the liquidity category; without it, liquidity coverage is unavailable (the verdict can
 * still be ALLOW, with medium confidence).
 */
export function tokenRiskReportDef(chain: ChainClient, market?: TokenMarketLookup): PaidReportDef {
  return {
    name: 'tokenRisk',
    body: TokenAddressRequest,
    response: TokenRiskReport,
    summary: 'Token risk: onchain evidence, simulated trades and a scored verdict',
    description: TOKEN_RISK_DESCRIPTION,
    example: { chain: 'base', address: USDC_ADDRESS },
    produce: (input: Static<typeof TokenAddressRequest>, now) => tokenRisk(chain, input, now, market ? { market } : {}),
  };
}
