// Every zoo token through the free tools, the way `npm run devnet` serves them: the token zoo on
// anvil and the market-data stub describing it (src/devnet/zoo-market.ts). The paid token-risk
// verdicts of the same tokens are in tests/paid/token-risk.test.ts.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { ZOO_BEHAVIOURS, startDevnet, type Devnet } from '../../src/devnet/index.js';
import { startMarketStub, type MarketStub } from '../../src/devnet/market-stub.js';
import { zooMarketFixtures } from '../../src/devnet/zoo-market.js';
import { ManualClock } from '../../src/platform/clock.js';
import { createRateLimiter } from '../../src/platform/rate-limit.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let devnet: Devnet;
let stub: MarketStub;
let app: App;
let database: TestDatabase;

beforeAll(async () => {
  devnet = await startDevnet({ zoo: true });
  stub = await startMarketStub({ tokens: zooMarketFixtures(devnet.zoo!) });
  const config = testConfig({
    rateLimits: false,
    logLevel: 'silent',
    rpcUrls: [devnet.rpcUrl],
    marketDexscreenerUrl: stub.dexscreenerUrl,
    marketGeckoterminalUrl: stub.geckoterminalUrl,
  });
  database = await createTestDatabase();
  const limiter = createRateLimiter(config, { keyPrefix: `t${randomBytes(4).toString('hex')}` });
  app = await buildApp({ config, database, clock: new ManualClock(), limiter, logger: false });
  await app.ready();
}, 180_000);

afterAll(async () => {
  await app?.close();
  await database?.drop();
  await stub?.stop();
  await devnet?.stop();
});

const post = (url: string, address: string) => app.inject({ method: 'POST', url, payload: { chain: 'base', address } });

describe('zoo tokens through token preview and coverage', () => {
  it.each(ZOO_BEHAVIOURS.filter((b) => b !== 'no-liquidity'))('%s: preview shows identity and market, and no verdict', async (behaviour) => {
    const token = devnet.zoo!.details[behaviour];
    const res = await post('/api/token-preview', token.address);
    expect(res.statusCode).toBe(200);
    const body = JSON.parse(res.body);
    expect(body.token).toMatchObject({ name: token.name, symbol: token.symbol, decimals: 18 });
    expect(body.market.pairs[0].pairAddress.toLowerCase()).toBe(token.pool!.pair.toLowerCase());
    expect(body.source).toMatchObject({ stale: false, limited: false });
    expect(JSON.stringify(body)).not.toMatch(/"verdict"|"decision"/);
  });

  it('no-liquidity: preview is 404 (no Base trading pair)', async () => {
    const res = await post('/api/token-preview', devnet.zoo!.tokens['no-liquidity']);
    expect(res.statusCode).toBe(404);
    expect(JSON.parse(res.body).code).toBe('no_trading_pair');
  });

  it.each(ZOO_BEHAVIOURS.filter((b) => b !== 'no-liquidity'))('%s: coverage lists every category and discloses the fee', async (behaviour) => {
    const res = await post('/api/token-coverage', devnet.zoo!.tokens[behaviour]);
    expect(res.statusCode).toBe(200);
    const body = JSON.parse(res.body);
    for (const category of ['identity', 'market', 'liquidity', 'contractCode', 'ownership', 'upgradeability', 'privilegedFunctions', 'transferSimulation', 'holderConcentration']) {
      expect(['available', 'partial', 'unavailable']).toContain(body.coverage[category].status);
    }
    expect(body.coverage.contractCode.status).toBe('available');
    expect(body.fee).toMatchObject({ price: '0.25', asset: 'USDC', chargedEvenWhenIncomplete: true });
  });
});
