// Every zoo token through the free tools, the way `npm run devnet` serves them: the token zoo on
// anvil and the market-data stub describing it (src/devnet/zoo-market.ts). The paid token-risk
// verdicts of the same tokens are in tests/paid/token-risk.test.ts.
import { describe, expect, it } from 'vitest';
import { ZOO_BEHAVIOURS } from '../../src/devnet/index.js';
import { zooMarketFixtures } from '../../src/devnet/zoo-market.js';
import { tokenRisk } from '../../src/features/token-risk/report.js';
import { createChainClient } from '../../src/platform/chain.js';
import { ManualClock } from '../../src/platform/clock.js';
import { suiteFixture } from '../helpers/suite.js';
import { startToolsStack } from './tools-helpers.js';

const clock = new ManualClock('2026-03-01T12:00:00.000Z');
const net = suiteFixture(() => startToolsStack({ zoo: true, tokens: (devnet) => zooMarketFixtures(devnet.zoo!), clock }), 180_000);

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
    // Every zoo token is a plain contract the paid report scans as it is.
    expect(body.coverage.privilegedFunctions.status).toBe('available');
    expect(body.fee).toMatchObject({ price: '0.25', asset: 'USDC', chargedEvenWhenIncomplete: true });
  });
});

describe('coverage promises exactly what the paid report can deliver (R5 #4)', () => {
  const paid = async (address: string) => tokenRisk(createChainClient({ rpcUrls: [net.devnet.rpcUrl], rpcTimeoutMs: 5000 }), { chain: 'base', address }, new Date());

  it.each(ZOO_BEHAVIOURS.filter((b) => b !== 'no-liquidity'))('%s: transferSimulation available in both, through the same pool', async (behaviour) => {
    const address = net.devnet.zoo!.tokens[behaviour];
    const cov = JSON.parse((await post('/api/token-coverage', address)).body);
    const report = await paid(address);
    expect(cov.coverage.transferSimulation).toEqual({ status: 'available', reason: expect.stringContaining(report.simulation!.pair) });
    expect(report.simulation!.pair).toBe(net.devnet.zoo!.details[behaviour].pool!.pair);
    expect(report.risk.coverage.transferSimulation.status).toBe('available');
    if (cov.complete) expect(report.verdict.decision).not.toBe('INCOMPLETE');
  });

  it('a token whose only market is an Aerodrome pair: not complete, and the paid report is indeed INCOMPLETE', async () => {
    const zoo = net.devnet.zoo!;
    const address = zoo.tokens['no-liquidity'];
    net.stub.setToken(address, {
      ...zooMarketFixtures(zoo)[zoo.tokens.honest]!,
      name: zoo.details['no-liquidity'].name,
      symbol: zoo.details['no-liquidity'].symbol,
      liquidityUsd: '250000',
      pairs: [{ dex: 'aerodrome', pairAddress: '0xaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeae', quoteToken: { address: zoo.weth, symbol: 'WETH' }, liquidityUsd: '250000', createdAt: '2026-01-01T00:00:00.000Z' }],
    });
    clock.advance(60_000); // past the reuse of the earlier "no pair" answer for this token
    const res = await post('/api/token-coverage', address);
    expect(res.statusCode, res.body).toBe(200);
    const cov = JSON.parse(res.body);
    expect(cov.coverage.liquidity.status).toBe('available');
    expect(cov.coverage.transferSimulation.status).toBe('unavailable');
    expect(cov.complete).toBe(false);
    expect((await paid(address)).verdict).toMatchObject({ decision: 'INCOMPLETE', reasons: ['transferSimulation_unavailable'] });
  });
});
