import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ProviderFaults } from '../../src/devnet/market-stub.js';
import { json } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import { suiteFixture } from '../helpers/suite.js';
import { UNKNOWN, USDC, ZOO, body, createTokenApp, freshZooToken, zooFixture, zooMarket } from './token-helpers.js';

const URL = '/api/token-preview';
const S = 1000;

const MARKET = zooMarket();
const WITHHELD = { priceUsd: null, liquidityUsd: null, volume24hUsd: null, fdvUsd: null, marketCapUsd: null, priceChange24hPct: null, pairs: null };

describe('POST /api/token-preview', () => {
  const t = suiteFixture(() => createTokenApp({ marketTimeoutMs: 300 }));
  let n = 0;
  // Each test previews its own token (a fresh cache entry), registered like ZOO.
  let token: string;
  beforeEach(() => {
    token = freshZooToken(t, 0x1000 + ++n);
    t.chain.identityCalls = 0;
    t.chain.identityDelayMs = 0;
  });
  afterEach(() => {
    t.stub.setToken(token, null);
  });

  const preview = (address = token) => t.post(URL, body(address));

  it('answers identity, market, source and paidReportAdds, with no verdict', async () => {
    const res = await preview();
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const out = json(res);
    expect(out).toEqual({
      token: { address: token, name: 'Zoo Token', symbol: 'ZOO', decimals: 18 },
      market: MARKET,
      source: { provider: 'dexscreener', fetchedAt: t.clock.now().toISOString(), ageSeconds: 0, stale: false, limited: false },
      paidReportAdds: {
        report: '/api/token-risk',
        method: 'POST',
        price: '0.25',
        asset: 'USDC',
        network: 'eip155:8453',
        chargedEvenWhenIncomplete: true,
        invoked: false,
        charged: false,
        adds: expect.any(Array),
        note: expect.stringMatching(/no security verdict/),
      },
    });
    expect(out.paidReportAdds.adds.map((a: { category: string }) => a.category)).toEqual([
      'ownership', 'privilegedFunctions', 'upgradeability', 'transferSimulation', 'holderConcentration',
    ]);
    expect(JSON.stringify(out)).not.toMatch(/verdict"|"decision"|"score"/);
  });

  it('reads decimals on Base when the provider (DexScreener) lacks them, once per token', async () => {
    t.chain.identityAnswer = { name: 'On-chain name', symbol: 'OCN', decimals: 9 };
    const first = json(await preview());
    // The provider's name and symbol stand; only the missing decimals come from Base.
    expect(first.token).toEqual({ address: token, name: 'Zoo Token', symbol: 'ZOO', decimals: 9 });
    expect(t.chain.identityCalls).toBe(1);
    t.clock.advance(31 * S);
    expect(json(await preview()).token.decimals).toBe(9);
    expect(t.chain.identityCalls).toBe(1);
    t.chain.identityAnswer = { name: 'Zoo Token', symbol: 'ZOO', decimals: 18 };
  });

  it("shows the provider's name and symbol without control, bidi or invisible characters", async () => {
    t.stub.setToken(token, { ...zooFixture(), name: 'Zoo\u202EnekoT\u200B\u0000', symbol: 'Z\u0007OO' });
    expect(json(await preview()).token).toMatchObject({ name: 'ZoonekoT', symbol: 'ZOO' });
  });

  it('shows the pairs\' quote-token symbols and DEX names the same way, at most 200 characters', async () => {
    const f = zooFixture();
    f.pairs[0]!.quoteToken.symbol = `USDC\u202Egnp.exe${'Z'.repeat(50_000)}`;
    f.pairs[1]!.dex = `uni\u202Eswap${'D'.repeat(50_000)}`;
    t.stub.setToken(token, f);
    const pairs: Array<{ dex: string; quoteToken: { symbol: string } }> = json(await preview()).market.pairs;
    expect(pairs.map((p) => p.quoteToken.symbol)).toContain(`USDCgnp.exe${'Z'.repeat(189)}`);
    expect(pairs.map((p) => p.dex)).toContain(`uniswap${'D'.repeat(193)}`);
  });

  it('an unreadable Base leaves decimals null but still previews the market', async () => {
    t.chain.failing = true;
    const res = json(await preview());
    expect(res.token.decimals).toBeNull();
    expect(res.market.priceUsd).toBe('0.0000012345');
  });

  it('a slow Base read holds a preview at most 3 s; its late answer is kept for the next one', async () => {
    // The read answers 1.5 s after the 3 s wait ends, so a loaded machine has a whole second of
    // margin to tell "gave up after 3 s" from "waited for the answer".
    const lateAnswerMs = 4500;
    t.chain.identityDelayMs = lateAnswerMs;
    t.chain.identityAnswer = { name: 'Zoo Token', symbol: 'ZOO', decimals: 7 };
    const started = Date.now();
    const first = json(await preview());
    expect(Date.now() - started).toBeLessThan(4000);
    expect(first.token.decimals).toBeNull();
    await new Promise((r) => setTimeout(r, lateAnswerMs - (Date.now() - started) + 100));
    t.chain.identityDelayMs = 0;
    t.clock.advance(31 * S);
    expect(json(await preview()).token.decimals).toBe(7);
    expect(t.chain.identityCalls).toBe(1);
    t.chain.identityAnswer = { name: 'Zoo Token', symbol: 'ZOO', decimals: 18 };
  });

  it('accepts any address case and answers the checksummed address', async () => {
    const res = json(await preview(token.toLowerCase()));
    expect(res.token.address).toBe(token);
  });

  it('prices a token from its own pairs, not from pairs where it is the quote token', async () => {
    // ZOO/USDC is listed under USDC by the providers; its price is ZOO's, not USDC's.
    const res = json(await preview(USDC));
    expect(res.market.priceUsd).toBe('0.9998');
    expect(res.market.pairs.map((p: { quoteToken: { symbol: string } }) => p.quoteToken.symbol)).toEqual(['WETH']);
  });

  it('reuses a provider answer for 30 s (one upstream lookup), then asks again', async () => {
    await preview();
    t.clock.advance(29 * S);
    const cached = json(await preview());
    expect(cached.source).toMatchObject({ ageSeconds: 29, stale: false, limited: false });
    expect(t.stub.counts().dexscreener).toBe(1);
    t.clock.advance(1 * S);
    const fresh = json(await preview());
    expect(fresh.source).toMatchObject({ ageSeconds: 0, stale: false, fetchedAt: t.clock.now().toISOString() });
    expect(t.stub.counts().dexscreener).toBe(2);
  });

  it('after the system clock is stepped back, an answer fetched "in the future" is asked again, never served as fresh or stale', async () => {
    const first = json(await preview());
    t.clock.advance(-3600 * S);
    const fresh = json(await preview());
    expect(fresh.source).toMatchObject({ ageSeconds: 0, stale: false, fetchedAt: t.clock.now().toISOString() });
    expect(t.stub.counts().dexscreener).toBe(2);
    expect(fresh.source.fetchedAt).not.toBe(first.source.fetchedAt);
    // During an outage, an answer of unknown age is no fallback either.
    t.clock.advance(10 * S);
    const stillFresh = json(await preview());
    expect(stillFresh.source.fetchedAt).toBe(fresh.source.fetchedAt);
    t.clock.advance(-3600 * S);
    t.stub.setFaults({ dexscreener: { fail: true }, geckoterminal: { fail: true } });
    expectProblem(await preview(), 502, 'upstream_unavailable');
  });

  it('concurrent previews of one token share one upstream lookup', async () => {
    t.stub.setFaults({ dexscreener: { slowMs: 100 } });
    const all = await Promise.all(Array.from({ length: 8 }, () => preview()));
    expect(all.map((r) => r.statusCode)).toEqual(Array(8).fill(200));
    expect(t.stub.counts().dexscreener).toBe(1);
  });

  describe('failover and quirks (each fails over to GeckoTerminal)', () => {
    it.each<[string, ProviderFaults]>([
      ['HTTP 500', { fail: true }],
      ['HTTP 429', { fail: 429 }],
      ['a timeout', { slowMs: 1000 }],
      ['an empty list', { empty: true }],
      ['pairs: null', { pairsNull: true }],
      ['numbers as strings', { numbersAsStrings: true }],
      ['the token only as quote token', { quoteTokenOnly: true }],
      ['missing fields', { missingFields: true }],
      ['a body that is not JSON', { invalidJson: true }],
    ])('DexScreener answering %s', async (_name, faults) => {
      t.stub.setFaults({ dexscreener: faults });
      const res = await preview();
      expect(res.statusCode, res.body).toBe(200);
      const out = json(res);
      expect(out.source).toMatchObject({ provider: 'geckoterminal', stale: false, limited: false });
      expect(out.market).toEqual(MARKET);
      // GeckoTerminal knows the decimals: no Base read needed.
      expect(out.token).toEqual({ address: token, name: 'Zoo Token', symbol: 'ZOO', decimals: 18 });
      expect(t.chain.identityCalls).toBe(0);
    });

    it.each<[string, ProviderFaults, ProviderFaults]>([
      ['both fail', { fail: true }, { fail: true }],
      ['DexScreener is empty, GeckoTerminal times out', { empty: true }, { slowMs: 1000 }],
      ['DexScreener sends pairs: null, GeckoTerminal numbers', { pairsNull: true }, { numbersAsStrings: true }],
      ['both list the token only as quote token', { quoteTokenOnly: true }, { quoteTokenOnly: true }],
    ])('502 when %s and nothing is cached', async (_name, dexscreener, geckoterminal) => {
      t.stub.setFaults({ dexscreener, geckoterminal });
      const res = await preview();
      const problem = expectProblem(res, 502, 'upstream_unavailable');
      // Never the providers' words or addresses.
      expect(res.body).not.toMatch(/127\.0\.0\.1|dexscreener:|geckoterminal:|HTTP 500/);
      expect(problem.detail).toMatch(/market-data providers are unavailable/);
    });
  });

  describe('404 versus 502', () => {
    it('404 when every provider answered cleanly that there is no Base pair', async () => {
      const problem = expectProblem(await preview(UNKNOWN), 404, 'no_trading_pair');
      expect(problem.title).toBe('No Base trading pair found');
    });

    it.each<[string, { dexscreener?: ProviderFaults; geckoterminal?: ProviderFaults }]>([
      ['DexScreener fails', { dexscreener: { fail: true } }],
      ['DexScreener answers pairs: null', { dexscreener: { pairsNull: true } }],
      ['GeckoTerminal fails', { geckoterminal: { fail: true } }],
      ['GeckoTerminal times out', { geckoterminal: { slowMs: 1000 } }],
    ])('502, not 404, for an unknown token when %s', async (_name, faults) => {
      t.stub.setFaults(faults);
      expectProblem(await preview(UNKNOWN), 502, 'upstream_unavailable');
    });

    it('a token whose pairs disappear is a 404 once the cache expires, not a stale answer', async () => {
      expect((await preview()).statusCode).toBe(200);
      t.stub.setToken(token, null);
      t.clock.advance(31 * S);
      expectProblem(await preview(), 404, 'no_trading_pair');
      // The clean "none" is also reused for 30 s.
      const before = t.stub.counts();
      expectProblem(await preview(), 404, 'no_trading_pair');
      expect(t.stub.counts()).toEqual(before);
    });
  });

  describe('staleness during a provider outage (spec limits: 900 s metrics, 86400 s identity)', () => {
    it('fresh → stale → limited → identity only → 502, then fresh again', async () => {
      const fetchedAt = t.clock.now().toISOString();
      expect(json(await preview()).source).toEqual({ provider: 'dexscreener', fetchedAt, ageSeconds: 0, stale: false, limited: false });

      t.stub.setFaults({ dexscreener: { fail: true }, geckoterminal: { fail: true } });
      t.clock.advance(31 * S);
      let out = json(await preview());
      expect(out.source).toEqual({ provider: 'dexscreener', fetchedAt, ageSeconds: 31, stale: true, limited: false });
      expect(out.market).toEqual(MARKET);

      t.clock.advance((900 - 31) * S); // exactly 900 s old: still served
      out = json(await preview());
      expect(out.source).toEqual({ provider: 'dexscreener', fetchedAt, ageSeconds: 900, stale: true, limited: false });
      expect(out.market).toEqual(MARKET);

      t.clock.advance(1 * S); // 901 s: metrics withheld, identity kept
      out = json(await preview());
      expect(out.source).toEqual({ provider: 'dexscreener', fetchedAt, ageSeconds: 901, stale: true, limited: true });
      expect(out.market).toEqual(WITHHELD);
      expect(out.token).toEqual({ address: token, name: 'Zoo Token', symbol: 'ZOO', decimals: 18 });
      expect(out.paidReportAdds.price).toBe('0.25');

      t.clock.advance((86_400 - 901) * S); // exactly 86400 s: identity still served
      out = json(await preview());
      expect(out.source).toMatchObject({ ageSeconds: 86_400, stale: true, limited: true });
      expect(out.token.symbol).toBe('ZOO');

      t.clock.advance(1 * S); // beyond both limits
      expectProblem(await preview(), 502, 'upstream_unavailable');

      t.stub.setFaults({});
      t.clock.advance(11 * S);
      out = json(await preview());
      expect(out.source).toEqual({ provider: 'dexscreener', fetchedAt: t.clock.now().toISOString(), ageSeconds: 0, stale: false, limited: false });
      expect(out.market).toEqual(MARKET);
    });

    it('a sub-millisecond past 900 s is already limited', async () => {
      await preview();
      t.stub.setFaults({ dexscreener: { fail: true }, geckoterminal: { fail: true } });
      t.clock.advance(900 * S + 1);
      const out = json(await preview());
      expect(out.source).toMatchObject({ ageSeconds: 900, stale: true, limited: true });
      expect(out.market).toEqual(WITHHELD);
    });

    it('quirks count as an outage too (stale, not 404)', async () => {
      await preview();
      t.stub.setFaults({ dexscreener: { empty: true }, geckoterminal: { pairsNull: true } });
      t.clock.advance(60 * S);
      const out = json(await preview());
      expect(out.source).toMatchObject({ stale: true, limited: false, ageSeconds: 60 });
    });

    it('after a failed refresh the providers are left alone for 10 s; recovery shows up after that', async () => {
      await preview();
      t.stub.setFaults({ dexscreener: { fail: true }, geckoterminal: { fail: true } });
      t.clock.advance(40 * S);
      expect(json(await preview()).source.stale).toBe(true);
      const calls = t.stub.counts();
      t.stub.setFaults({});
      t.clock.advance(9 * S);
      expect(json(await preview()).source).toMatchObject({ stale: true, ageSeconds: 49 });
      expect(t.stub.counts()).toEqual(calls);
      t.clock.advance(1 * S);
      expect(json(await preview()).source).toMatchObject({ stale: false, ageSeconds: 0 });
    });

    it('the fallback answer is the last GOOD one, whichever provider gave it', async () => {
      t.stub.setFaults({ dexscreener: { fail: true } });
      expect(json(await preview()).source.provider).toBe('geckoterminal');
      t.stub.setFaults({ dexscreener: { fail: true }, geckoterminal: { fail: true } });
      t.clock.advance(100 * S);
      expect(json(await preview()).source).toMatchObject({ provider: 'geckoterminal', stale: true, ageSeconds: 100 });
    });
  });

  it('both tools are listed as free tools and documented in /openapi.json', async () => {
    const catalogue = json(await t.app.inject({ method: 'GET', url: '/api/services' }));
    const free = catalogue.freeTools.map((e: { endpoint: string; price: string }) => [e.endpoint, e.price]);
    expect(free).toEqual(expect.arrayContaining([['/api/token-preview', '0'], ['/api/token-coverage', '0']]));
    const doc = json(await t.app.inject({ method: 'GET', url: '/openapi.json' }));
    for (const path of ['/api/token-preview', '/api/token-coverage']) {
      const op = doc.paths[path].post;
      expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['200', '400', '404', '429', '502']));
      expect(op.requestBody.content['application/json'].schema.additionalProperties).toBe(false);
    }
    expect(Object.keys(doc.paths['/api/token-preview'].post.responses['200'].content['application/json'].schema.properties)).toEqual(['token', 'market', 'source', 'paidReportAdds']);
  });

  describe('400: invalid Base token address', () => {
    it.each<[string, unknown, string]>([
      ['a short address', { chain: 'base', address: '0x1234' }, 'body/address'],
      ['a non-hex address', { chain: 'base', address: `0x${'g'.repeat(40)}` }, 'body/address'],
      ['an address without 0x', { chain: 'base', address: 'a'.repeat(40) }, 'body/address'],
      ['a number', { chain: 'base', address: 12 }, 'body/address'],
      ['another chain', { chain: 'ethereum', address: ZOO }, 'body/chain'],
      ['no chain', { address: ZOO }, 'body/chain'],
      ['no address', { chain: 'base' }, 'body/address'],
      ['an unknown property', { chain: 'base', address: ZOO, extra: 1 }, 'body/extra'],
    ])('%s', async (_name, payload, path) => {
      expectInvalid(await t.post(URL, payload), path);
      expect(t.stub.counts()).toEqual({ dexscreener: 0, geckoterminal: 0 });
    });
  });
});

describe('POST /api/token-preview rate limit', () => {
  const t = suiteFixture(() => createTokenApp({ rateLimits: true }));

  it('60 per 3600 s per source, then 429 with Retry-After; other sources and the coverage limit are separate', async () => {
    for (let i = 0; i < 60; i++) expect((await t.post(URL, body(ZOO))).statusCode).toBe(200);
    const res = await t.post(URL, body(ZOO));
    const problem = expectProblem(res, 429, 'rate_limited');
    const retryAfter = Number(res.headers['retry-after']);
    expect(retryAfter).toBeGreaterThan(3500);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    expect(problem.retryAfter).toBe(retryAfter);
    expect(problem.title).toBe('Per-source free preview limit reached');
    // Invalid bodies count too (the limit is checked first), and answer 429 as well.
    expectProblem(await t.post(URL, { chain: 'base' }), 429, 'rate_limited');
    // Another source is not affected, nor is the coverage limit of this source.
    const other = await t.app.inject({ method: 'POST', url: URL, payload: body(ZOO), remoteAddress: '10.9.8.7' });
    expect(other.statusCode).toBe(200);
    expect((await t.post('/api/token-coverage', body(ZOO))).statusCode).toBe(200);
  });
});
