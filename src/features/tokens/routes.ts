import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppDeps } from '../../app.js';
import { createChainClient } from '../../platform/chain.js';
import { createMarketData } from '../../platform/market/failover.js';
import { problems } from '../../platform/schemas.js';
import { viemTokenChainReader } from './chain-reader.js';
import { COVERAGE_CACHE_SECONDS, CoverageResponse } from './coverage.js';
import { FRESH_SECONDS, STALE_IDENTITY_SECONDS, STALE_MARKET_SECONDS } from './market-view.js';
import { PreviewResponse } from './preview.js';
import { TokenAddressRequest } from './schemas.js';
import { TokenTools } from './service.js';

const ERRORS =
  '400 invalid Base token address; 404 no Base trading pair found (every provider answered cleanly that there is none); 429 per-source limit of 60 requests per 3600 s, with Retry-After; 502 market-data providers unavailable and no usable last good answer.';

export const tokenRoutes: FastifyPluginAsyncTypebox<AppDeps> = async (app, deps) => {
  const chain = deps.market?.chain ?? viemTokenChainReader(deps.chain ?? createChainClient(deps.config));
  const data = deps.market?.data ?? createMarketData(deps.config, deps.clock);
  const tools = new TokenTools(data, chain, deps.clock, app.log);

  app.post(
    '/api/token-preview',
    {
      onRequest: deps.limiter.hook('tokenPreview'),
      schema: {
        tags: ['tokens'],
        operationId: 'previewToken',
        summary: 'Token market preview (free): identity, price, liquidity, volume, pairs; no security verdict',
        description: [
          'Market data from DexScreener, failing over to GeckoTerminal. Only pairs where the token is the BASE token count.',
          'USD figures are decimal strings. The token identity comes from the provider, completed on Base (ERC-20 calls batched through Multicall3) where the provider lacks a field.',
          `Freshness: provider answers are reused for up to ${FRESH_SECONDS} s. During a provider outage the last good market metrics are served for at most ${STALE_MARKET_SECONDS} s after they were fetched (source.stale true); after that they are withheld (null, source.limited true) and only the identity is served, for up to ${STALE_IDENTITY_SECONDS} s; then 502. The last good answers are kept in memory per instance.`,
          ERRORS,
        ].join('\n\n'),
        body: TokenAddressRequest,
        response: { 200: PreviewResponse, ...problems(400, 404, 413, 415, 429, 502) },
      },
    },
    async (request) => tools.preview(request.body.address),
  );

  app.post(
    '/api/token-coverage',
    {
      onRequest: deps.limiter.hook('tokenCoverage'),
      schema: {
        tags: ['tokens'],
        operationId: 'getTokenCoverage',
        summary: 'Which evidence the paid token-risk report could cover for a token (free)',
        description: [
          'Per category (identity, market, liquidity, contractCode, ownership, upgradeability, privilegedFunctions, transferSimulation, holderConcentration): available, partial or unavailable, with a reason.',
          'Decided from cheap reads only: the market preview data plus, in parallel, eth_getCode, the EIP-1967 and ZeppelinOS implementation slots, and the Uniswap v2 pool discovery of the paid report itself (one Multicall3 eth_call), so transferSimulation is available exactly when the report could simulate through a pool deep enough to measure. Base answers count only from an RPC that says it serves Base (eth_chainId 8453, asked once); otherwise the onchain categories are unavailable (Base could not be read).',
          `Cached per token for up to ${COVERAGE_CACHE_SECONDS} s; paid results may differ. The token-risk report is charged even when it is INCOMPLETE.`,
          ERRORS,
        ].join('\n\n'),
        body: TokenAddressRequest,
        response: { 200: CoverageResponse, ...problems(400, 404, 413, 415, 429, 502) },
      },
    },
    async (request) => tools.coverage(request.body.address),
  );
};
