// Shared set-up of the token-preview and token-coverage API tests: the market-data stub (real
// provider paths and shapes over HTTP, real adapters), a manual clock, and Base reads behind the
// TokenChainReader interface (the real reads are tested on the devnet in tests/devnet).
import { randomBytes } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import { getAddress } from 'viem';
import { buildApp, type App } from '../../src/app.js';
import { testConfig, type Config } from '../../src/config.js';
import { startMarketStub, type MarketFixture, type MarketStub } from '../../src/devnet/market-stub.js';
import type { PoolChoice } from '../../src/features/token-risk/pools.js';
import type { ContractFacts, TokenChainReader } from '../../src/features/tokens/chain-reader.js';
import { ManualClock } from '../../src/platform/clock.js';
import { AppError } from '../../src/platform/errors.js';
import { createMarketData } from '../../src/platform/market/failover.js';
import { createRateLimiter } from '../../src/platform/rate-limit.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

export const USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
export const WETH = '0x4200000000000000000000000000000000000006';
export const ZOO = '0x5a00000000000000000000000000000000000001';
export const UNKNOWN = '0x5a000000000000000000000000000000000000ff';

export const zooFixture = (): MarketFixture => ({
  name: 'Zoo Token',
  symbol: 'ZOO',
  decimals: 18,
  priceUsd: '0.0000012345',
  liquidityUsd: '15000.5',
  volume24hUsd: '1234.56',
  fdvUsd: '1234500',
  marketCapUsd: '987654.25',
  priceChange24hPct: '-3.25',
  pairs: [
    { dex: 'uniswap', pairAddress: '0x5a000000000000000000000000000000000000b2', quoteToken: { address: WETH, symbol: 'WETH' }, liquidityUsd: '5000', createdAt: '2026-01-02T00:00:00.000Z' },
    { dex: 'uniswap', pairAddress: '0x5a000000000000000000000000000000000000b1', quoteToken: { address: USDC, symbol: 'USDC' }, liquidityUsd: '10000.5', createdAt: '2026-01-01T00:00:00.000Z' },
  ],
});

/** ZOO's pairs as the adapters and the API answer them: checksummed, most liquid first. */
export const ZOO_PAIRS = [
  { dex: 'uniswap', pairAddress: getAddress('0x5a000000000000000000000000000000000000b1'), quoteToken: { address: USDC, symbol: 'USDC' }, liquidityUsd: '10000.5', createdAt: '2026-01-01T00:00:00.000Z' },
  { dex: 'uniswap', pairAddress: getAddress('0x5a000000000000000000000000000000000000b2'), quoteToken: { address: WETH, symbol: 'WETH' }, liquidityUsd: '5000', createdAt: '2026-01-02T00:00:00.000Z' },
];

/** ZOO's market figures as the adapters and the API answer them: zooFixture()'s numbers, with ZOO_PAIRS. */
export function zooMarket() {
  const { priceUsd, liquidityUsd, volume24hUsd, fdvUsd, marketCapUsd, priceChange24hPct } = zooFixture();
  return { priceUsd, liquidityUsd, volume24hUsd, fdvUsd, marketCapUsd, priceChange24hPct, pairs: ZOO_PAIRS };
}

export const usdcFixture = (): MarketFixture => ({
  name: 'USD Coin',
  symbol: 'USDC',
  decimals: 6,
  priceUsd: '0.9998',
  liquidityUsd: '25000000',
  volume24hUsd: '150000000',
  fdvUsd: null,
  marketCapUsd: null,
  priceChange24hPct: '0.01',
  pairs: [{ dex: 'aerodrome', pairAddress: '0x5a000000000000000000000000000000000000c1', quoteToken: { address: WETH, symbol: 'WETH' }, liquidityUsd: '25000000', createdAt: '2024-05-01T00:00:00.000Z' }],
});

export const plainFacts = (over: Partial<ContractFacts> = {}): ContractFacts => ({
  codeSize: 2400,
  cloneTarget: null,
  delegatedTo: null,
  eip1967Implementation: null,
  zosImplementation: null,
  delegatecall: false,
  ...over,
});

/** A Uniswap v2 pool the paid report could simulate through (25,000 USDC deep). */
export const usablePool = (): PoolChoice => ({
  kind: 'pool',
  pool: { dex: 'uniswap-v2', pair: '0x5a000000000000000000000000000000000000b1', quote: { symbol: 'USDC', address: USDC, decimals: 6 }, reserveToken: 500_000n * 10n ** 18n, reserveQuote: 25_000n * 10n ** 6n },
  tokenBalance: 500_000n * 10n ** 18n,
});

/** Base reads for API tests: fixed answers, counted calls, switchable failures. */
export class FakeChain implements TokenChainReader {
  identityCalls = 0;
  contractCalls = 0;
  identityAnswer: { name: string | null; symbol: string | null; decimals: number | null } = { name: 'Zoo Token', symbol: 'ZOO', decimals: 18 };
  facts: ContractFacts = plainFacts();
  poolAnswer: PoolChoice = usablePool();
  poolCalls = 0;
  failing = false;
  identityDelayMs = 0;

  async identity() {
    this.identityCalls++;
    if (this.identityDelayMs) await new Promise((r) => setTimeout(r, this.identityDelayMs));
    if (this.failing) throw new AppError('upstream_unavailable', 'Base could not be read');
    return { ...this.identityAnswer };
  }
  async contract() {
    this.contractCalls++;
    if (this.failing) throw new AppError('upstream_unavailable', 'Base could not be read');
    return { ...this.facts };
  }
  async pool() {
    this.poolCalls++;
    if (this.failing) throw new AppError('upstream_unavailable', 'Base could not be read');
    return this.poolAnswer;
  }
}

export interface TokenTestApp {
  app: App;
  stub: MarketStub;
  clock: ManualClock;
  chain: FakeChain;
  config: Config;
  post(url: '/api/token-preview' | '/api/token-coverage', body: unknown, headers?: Record<string, string>): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
}

export async function createTokenApp(opts: { rateLimits?: boolean; marketTimeoutMs?: number } = {}): Promise<TokenTestApp> {
  const stub = await startMarketStub({ tokens: { [ZOO]: zooFixture(), [USDC]: usdcFixture() } });
  const config = testConfig({
    rateLimits: opts.rateLimits ?? false,
    logLevel: 'silent',
    marketDexscreenerUrl: stub.dexscreenerUrl,
    marketGeckoterminalUrl: stub.geckoterminalUrl,
    marketTimeoutMs: opts.marketTimeoutMs ?? 2000,
  });
  const database: TestDatabase = await createTestDatabase();
  const clock = new ManualClock('2026-03-01T12:00:00.000Z');
  const chain = new FakeChain();
  const limiter = createRateLimiter(config, { keyPrefix: `t${randomBytes(4).toString('hex')}` });
  const app = await buildApp({
    config,
    database,
    clock,
    limiter,
    logger: false,
    market: { data: createMarketData(config, clock, { retryDelayMs: 5 }), chain },
  });
  await app.ready();
  return {
    app,
    stub,
    clock,
    chain,
    config,
    post: (url, body, headers = {}) => app.inject({ method: 'POST', url, payload: body as object, headers }),
    async close() {
      await app.close();
      await database.drop();
      await stub.stop();
    },
  };
}

export const body = (address: string) => ({ chain: 'base', address });

/**
 * Before a test: registers token 0x5a…<id in hex> with ZOO's market data (its own cache entry),
 * clears the stub's faults and counts and Base failures, and moves the clock 3 days on, far
 * enough from the previous test for no token's failure back-off to matter. Returns the address.
 */
export function freshZooToken(t: TokenTestApp, id: number): string {
  const token = getAddress(`0x5a0000000000000000000000000000000000${id.toString(16)}`);
  t.stub.setToken(token, zooFixture());
  t.stub.setFaults({});
  t.stub.resetCounts();
  t.chain.failing = false;
  t.clock.advance(86_400 * 1000 * 3);
  return token;
}
