// The market-data stub speaks the providers' real paths and shapes (what the adapters are
// tested against), and its faults do what they say.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startMarketStub, type MarketStub } from '../../src/devnet/market-stub.js';
import { UNKNOWN, USDC, ZOO, usdcFixture, zooFixture } from '../api/token-helpers.js';
import { fetchBody } from '../helpers/http.js';

let stub: MarketStub;
const get = async (url: string) => {
  const { status, body } = await fetchBody(url);
  return { status, body };
};

beforeAll(async () => {
  stub = await startMarketStub({ tokens: { [ZOO]: zooFixture() } });
});
afterAll(async () => {
  await stub?.stop();
});
beforeEach(() => {
  stub.setFaults({});
  stub.setToken(USDC, null);
});

describe('market-data stub', () => {
  it('listens on 127.0.0.1 with one base URL per provider', () => {
    expect(stub.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(stub.dexscreenerUrl).toBe(`${stub.url}/dexscreener`);
    expect(stub.geckoterminalUrl).toBe(`${stub.url}/geckoterminal`);
  });

  it('DexScreener /tokens/v1 and /token-pairs/v1: arrays of pairs of the documented shape', async () => {
    for (const path of [`/tokens/v1/base/${ZOO}`, `/token-pairs/v1/base/${ZOO}`]) {
      const { status, body } = await get(stub.dexscreenerUrl + path);
      expect(status).toBe(200);
      expect(Array.isArray(body)).toBe(true);
      expect(body).toHaveLength(2);
      const pair = body[0];
      expect(Object.keys(pair).sort()).toEqual(
        ['baseToken', 'chainId', 'dexId', 'fdv', 'liquidity', 'marketCap', 'pairAddress', 'pairCreatedAt', 'priceChange', 'priceNative', 'priceUsd', 'quoteToken', 'txns', 'url', 'volume'].sort(),
      );
      expect(pair).toMatchObject({
        chainId: 'base',
        dexId: 'uniswap',
        baseToken: { address: ZOO, name: 'Zoo Token', symbol: 'ZOO' },
        priceUsd: '0.0000012345',
        volume: { h24: 1234.56 },
        priceChange: { h24: -3.25 },
        liquidity: { usd: 5000 },
        fdv: 1234500,
        marketCap: 987654.25,
        pairCreatedAt: Date.parse('2026-01-02T00:00:00.000Z'),
      });
      expect(typeof pair.pairCreatedAt).toBe('number');
    }
  });

  it('tokens/v1 takes up to 30 comma-separated addresses and also lists pairs quoted in the token', async () => {
    stub.setToken(USDC, usdcFixture());
    const both = await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO},${USDC}`);
    expect(both.body.length).toBe(2 + 1 + 1); // ZOO's two pairs, USDC's own, ZOO/USDC again under USDC
    const usdc = await get(`${stub.dexscreenerUrl}/tokens/v1/base/${USDC}`);
    expect(usdc.body.map((p: any) => `${p.baseToken.symbol}/${p.quoteToken.symbol}`).sort()).toEqual(['USDC/WETH', 'ZOO/USDC']);
  });

  it('GeckoTerminal token and pools: JSON:API documents with string figures', async () => {
    const token = await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}`);
    expect(token.status).toBe(200);
    expect(token.body.data).toMatchObject({
      id: `base_${ZOO.toLowerCase()}`,
      type: 'token',
      attributes: { address: ZOO.toLowerCase(), name: 'Zoo Token', symbol: 'ZOO', decimals: 18, price_usd: '0.0000012345', total_reserve_in_usd: '15000.5', volume_usd: { h24: '1234.56' }, fdv_usd: '1234500', market_cap_usd: '987654.25' },
    });
    const pools = await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}/pools?include=base_token,quote_token,dex`);
    expect(pools.body.data).toHaveLength(2);
    expect(pools.body.data[0]).toMatchObject({
      type: 'pool',
      attributes: { reserve_in_usd: '5000', pool_created_at: '2026-01-02T00:00:00Z', price_change_percentage: { h24: '-3.25' } },
      relationships: { base_token: { data: { id: `base_${ZOO.toLowerCase()}`, type: 'token' } }, dex: { data: { id: 'uniswap', type: 'dex' } } },
    });
    expect(pools.body.included.map((r: any) => r.type).sort()).toEqual(['dex', 'token', 'token', 'token']);
    const bare = await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}/pools`);
    expect(bare.body.included).toBeUndefined();
  });

  it('an unknown token gets each provider\'s real "nothing here"', async () => {
    expect(await get(`${stub.dexscreenerUrl}/tokens/v1/base/${UNKNOWN}`)).toEqual({ status: 200, body: [] });
    expect(await get(`${stub.dexscreenerUrl}/token-pairs/v1/base/${UNKNOWN}`)).toEqual({ status: 200, body: [] });
    const gecko = await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${UNKNOWN}`);
    expect(gecko).toEqual({ status: 404, body: { errors: [{ status: '404', title: 'Not Found' }] } });
  });

  it('faults: fail, empty, pairs null, wrong number types, quote-token-only, missing fields, invalid JSON', async () => {
    stub.setFaults({ dexscreener: { fail: 503 }, geckoterminal: { fail: true } });
    expect((await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).status).toBe(503);
    expect((await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}`)).status).toBe(500);

    stub.setFaults({ dexscreener: { empty: true }, geckoterminal: { empty: true } });
    expect((await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).body).toEqual([]);
    expect((await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}/pools`)).body).toEqual({ data: [] });

    stub.setFaults({ dexscreener: { pairsNull: true }, geckoterminal: { pairsNull: true } });
    expect((await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).body).toEqual({ schemaVersion: '1.0.0', pairs: null });
    expect((await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}/pools`)).body).toEqual({ data: null });

    stub.setFaults({ dexscreener: { numbersAsStrings: true }, geckoterminal: { numbersAsStrings: true } });
    const dexPair = (await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).body[0];
    expect(dexPair.liquidity.usd).toBe('5000');
    expect(dexPair.priceUsd).toBe(0.0000012345);
    expect((await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}`)).body.data.attributes.price_usd).toBe(0.0000012345);

    stub.setFaults({ dexscreener: { quoteTokenOnly: true }, geckoterminal: { quoteTokenOnly: true } });
    expect((await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).body.every((p: any) => p.quoteToken.address === ZOO)).toBe(true);
    const pools = (await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}/pools`)).body.data;
    expect(pools.every((p: any) => p.relationships.quote_token.data.id === `base_${ZOO.toLowerCase()}`)).toBe(true);

    stub.setFaults({ dexscreener: { missingFields: true }, geckoterminal: { missingFields: true } });
    expect('priceUsd' in (await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).body[0]).toBe(false);
    expect('price_usd' in (await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}`)).body.data.attributes).toBe(false);

    stub.setFaults({ dexscreener: { invalidJson: true } });
    expect(typeof (await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).body).toBe('string');
  });

  it('slow: answers after the delay', async () => {
    stub.setFaults({ geckoterminal: { slowMs: 150 } });
    const started = Date.now();
    expect((await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}`)).status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
  });

  it('counts requests per provider; setToken(null) forgets a token', async () => {
    stub.resetCounts();
    await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`);
    await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}`);
    await get(`${stub.geckoterminalUrl}/api/v2/networks/base/tokens/${ZOO}`);
    expect(stub.counts()).toEqual({ dexscreener: 1, geckoterminal: 2 });
    stub.setToken(ZOO, null);
    expect((await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO}`)).body).toEqual([]);
    stub.setToken(ZOO.toUpperCase().replace('0X', '0x'), zooFixture());
    expect((await get(`${stub.dexscreenerUrl}/tokens/v1/base/${ZOO.toLowerCase()}`)).body).toHaveLength(2);
  });
});
