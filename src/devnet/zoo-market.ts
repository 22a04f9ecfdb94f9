import type { MarketFixture } from './market-stub.js';
import type { ZooDeployment } from './zoo/index.js';
import { USDC_ADDRESS } from './usdc.js';

/**
 * What the market-data stub says about the devnet's tokens: every zoo token with a pool gets a
 * Uniswap v2 pair with enough liquidity not to matter to the verdict (the zoo is about contract
 * behaviour), the no-liquidity token gets no pair at all, and USDC its WETH pool.
 */
export function zooMarketFixtures(zoo: ZooDeployment): Record<string, MarketFixture> {
  const createdAt = '2026-01-01T00:00:00.000Z';
  const fixtures: Record<string, MarketFixture> = {};
  for (const t of Object.values(zoo.details)) {
    const pairs = t.pool
      ? [{ dex: 'uniswap', pairAddress: t.pool.pair, quoteToken: { address: t.pool.quoteAddress, symbol: t.pool.quote }, liquidityUsd: '250000', createdAt }]
      : [];
    fixtures[t.address] = {
      name: t.name,
      symbol: t.symbol,
      decimals: t.decimals,
      priceUsd: '0.01',
      liquidityUsd: t.pool ? '250000' : '0',
      volume24hUsd: t.pool ? '12000' : '0',
      fdvUsd: '1000000',
      marketCapUsd: '1000000',
      priceChange24hPct: '0.5',
      pairs,
    };
  }
  fixtures[USDC_ADDRESS] = {
    name: 'USD Coin',
    symbol: 'USDC',
    decimals: 6,
    priceUsd: '1.0000',
    liquidityUsd: '600000',
    volume24hUsd: '50000',
    fdvUsd: null,
    marketCapUsd: null,
    priceChange24hPct: '0',
    pairs: [{ dex: 'uniswap', pairAddress: zoo.wethUsdcPair, quoteToken: { address: zoo.weth, symbol: 'WETH' }, liquidityUsd: '600000', createdAt }],
  };
  return fixtures;
}
