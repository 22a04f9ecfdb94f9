// Every zoo token through the free tools, the way `npm run devnet` serves them: the token zoo on
// anvil and the market-data stub describing it (src/devnet/zoo-market.ts). The paid token-risk
// verdicts of the same tokens are in tests/paid/token-risk.test.ts.
import { describe, expect, it } from 'vitest';
import { ZOO_BEHAVIOURS } from '../../src/devnet/index.js';
import { zooMarketFixtures } from '../../src/devnet/zoo-market.js';
import { suiteFixture } from '../helpers/suite.js';
import { startToolsStack } from './tools-helpers.js';

const net = suiteFixture(() => startToolsStack({ zoo: true, tokens: (devnet) => zooMarketFixtures(devnet.zoo!) }), 180_000);

const post = (url: string, address: string) => net.app.inject({ method: 'POST', url, payload: { chain: 'base', address } });

describe('zoo tokens through token preview and coverage', () => {
  it.each(ZOO_BEHAVIOURS.filter((b) => b !== 'no-liquidity'))('%s: preview shows identity and market, and no verdict', async (behaviour) => {
    const token = net.devnet.zoo!.details[behaviour];
    const res = await post('/api/token-preview', token.address);
    expect(res.statusCode).toBe(200);
    const body = JSON.parse(res.body);
    expect(body.token).toMatchObject({ name: token.name, symbol: token.symbol, decimals: 18 });
    expect(body.market.pairs[0].pairAddress.toLowerCase()).toBe(token.pool!.pair.toLowerCase());
    expect(body.source).toMatchObject({ stale: false, limited: false });
    expect(JSON.stringify(body)).not.toMatch(/"verdict"|"decision"/);
  });

  it('no-liquidity: preview is 404 (no Base trading pair)', async () => {
    const res = await post('/api/token-preview', net.devnet.zoo!.tokens['no-liquidity']);
    expect(res.statusCode).toBe(404);
    expect(JSON.parse(res.body).code).toBe('no_trading_pair');
  });

  it.each(ZOO_BEHAVIOURS.filter((b) => b !== 'no-liquidity'))('%s: coverage lists every category and discloses the fee', async (behaviour) => {
    const res = await post('/api/token-coverage', net.devnet.zoo!.tokens[behaviour]);
    expect(res.statusCode).toBe(200);
    const body = JSON.parse(res.body);
    for (const category of ['identity', 'market', 'liquidity', 'contractCode', 'ownership', 'upgradeability', 'privilegedFunctions', 'transferSimulation', 'holderConcentration']) {
      expect(['available', 'partial', 'unavailable']).toContain(body.coverage[category].status);
    }
    expect(body.coverage.contractCode.status).toBe('available');
    expect(body.fee).toMatchObject({ price: '0.25', asset: 'USDC', chargedEvenWhenIncomplete: true });
  });
});
