// The provider adapters and their failover, against the market-data stub over HTTP (the stub
// serves the providers' real paths and shapes; tests/unit/market-stub.test.ts checks those).
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startMarketStub, type MarketStub, type ProviderFaults } from '../../src/devnet/market-stub.js';
import { ManualClock } from '../../src/platform/clock.js';
import { DexScreenerProvider } from '../../src/platform/market/dexscreener.js';
import { MarketData, MarketUnavailableError } from '../../src/platform/market/failover.js';
import { GeckoTerminalProvider } from '../../src/platform/market/geckoterminal.js';
import { ProviderError, type MarketProvider } from '../../src/platform/market/types.js';
import { UNKNOWN, USDC, ZOO, usdcFixture, zooFixture, zooMarket } from '../api/token-helpers.js';

const zoo = ZOO.toLowerCase();
const clock = new ManualClock('2026-03-01T12:00:00.000Z');
const policy = { timeoutMs: 300, retryCount: 1, retryDelayMs: 5 };
let stub: MarketStub;
let dex: DexScreenerProvider;
let gecko: GeckoTerminalProvider;

beforeAll(async () => {
  stub = await startMarketStub({ tokens: { [ZOO]: zooFixture(), [USDC]: usdcFixture() } });
  dex = new DexScreenerProvider(stub.dexscreenerUrl, policy, () => clock.now());
  gecko = new GeckoTerminalProvider(stub.geckoterminalUrl, policy, () => clock.now());
});
afterAll(async () => {
  await stub?.stop();
});
beforeEach(() => {
  stub.setFaults({});
  stub.resetCounts();
});

async function failure(p: MarketProvider, address = zoo): Promise<ProviderError> {
  try {
    await p.lookup(address);
  } catch (e) {
    expect(e).toBeInstanceOf(ProviderError);
    return e as ProviderError;
  }
  throw new Error('expected a ProviderError');
}

describe('DexScreener adapter', () => {
  it('normalizes the pairs where the token is the base token into one snapshot', async () => {
    const out = await dex.lookup(zoo);
    expect(out).toEqual({
      kind: 'market',
      snapshot: {
        provider: 'dexscreener',
        token: { address: ZOO, name: 'Zoo Token', symbol: 'ZOO', decimals: null },
        ...zooMarket(),
        fetchedAt: clock.now(),
      },
    });
    expect(stub.counts().dexscreener).toBe(1);
  });

  it('takes the price from the token\'s own pairs, not from pairs where it is the quote token', async () => {
    // /tokens/v1/base/USDC also lists ZOO/USDC (USDC as quote, priced in ZOO terms).
    const listed = (await (await fetch(`${stub.dexscreenerUrl}/tokens/v1/base/${USDC}`)).json()) as Array<{ baseToken: { symbol: string } }>;
    expect(listed.map((p) => p.baseToken.symbol).sort()).toEqual(['USDC', 'ZOO']);
    const out = await dex.lookup(USDC.toLowerCase());
    expect(out.kind).toBe('market');
    if (out.kind !== 'market') return;
    expect(out.snapshot.priceUsd).toBe('0.9998');
    expect(out.snapshot.pairs.map((p) => p.quoteToken.symbol)).toEqual(['WETH']);
    expect(out.snapshot.liquidityUsd).toBe('25000000');
    expect(out.snapshot.fdvUsd).toBeNull(); // not reported: the key is absent in DexScreener's pair
  });

  it('an unknown token is an inconclusive empty answer, confirmed on /token-pairs/v1', async () => {
    expect(await dex.lookup(UNKNOWN)).toEqual({ kind: 'empty' });
    expect(stub.counts().dexscreener).toBe(2);
  });

  const cases: Array<[string, ProviderFaults, string, number]> = [
    ['HTTP 500 (retried once)', { fail: true }, 'http_status', 2],
    ['HTTP 429 (retried once)', { fail: 429 }, 'http_status', 2],
    ['pairs: null', { pairsNull: true }, 'pairs_null', 1],
    ['numbers as strings (and priceUsd as a number)', { numbersAsStrings: true }, 'shape', 1],
    ['the token only as quote token', { quoteTokenOnly: true }, 'quote_token_only', 2],
    ['missing priceUsd', { missingFields: true }, 'shape', 1],
    ['a body that is not JSON', { invalidJson: true }, 'invalid_json', 1],
  ];
  it.each(cases)('%s is a failure, not "no market"', async (_name, faults, kind, requests) => {
    stub.setFaults({ dexscreener: faults });
    const err = await failure(dex);
    expect(err.kind).toBe(kind);
    expect(err.provider).toBe('dexscreener');
    expect(stub.counts().dexscreener).toBe(requests);
  });

  it('an HTTP 400 is not retried', async () => {
    stub.setFaults({ dexscreener: { fail: 400 } });
    expect((await failure(dex)).kind).toBe('http_status');
    expect(stub.counts().dexscreener).toBe(1);
  });

  it('a slow answer times out, is retried once, then fails', async () => {
    stub.setFaults({ dexscreener: { slowMs: 1000 } });
    const started = Date.now();
    const err = await failure(dex);
    expect(err.kind).toBe('timeout');
    expect(stub.counts().dexscreener).toBe(2);
    expect(Date.now() - started).toBeLessThan(1500);
  });

  it('an empty list for a listed token comes back as the same inconclusive answer', async () => {
    stub.setFaults({ dexscreener: { empty: true } });
    expect(await dex.lookup(zoo)).toEqual({ kind: 'empty' });
  });

  it('a connection refused is a network failure', async () => {
    const dead = new DexScreenerProvider('http://127.0.0.1:9', policy, () => clock.now());
    expect((await failure(dead)).kind).toBe('network');
  });
});

describe('GeckoTerminal adapter', () => {
  it('normalizes the token and its pools (decimals included)', async () => {
    const out = await gecko.lookup(zoo);
    expect(out.kind).toBe('market');
    if (out.kind !== 'market') return;
    expect(out.snapshot).toEqual({
      provider: 'geckoterminal',
      token: { address: ZOO, name: 'Zoo Token', symbol: 'ZOO', decimals: 18 },
      ...zooMarket(),
      fetchedAt: clock.now(),
    });
    expect(stub.counts().geckoterminal).toBe(2); // token and pools, in parallel
  });

  it('skips pools where the token is the quote token', async () => {
    const out = await gecko.lookup(USDC.toLowerCase());
    expect(out.kind === 'market' && out.snapshot.pairs.map((p) => p.quoteToken.symbol)).toEqual(['WETH']);
  });

  it('its own 404 for an unknown token is an authoritative "none"', async () => {
    expect(await gecko.lookup(UNKNOWN)).toEqual({ kind: 'none' });
  });

  it('a 404 without GeckoTerminal\'s error body (a wrong base URL) is a failure, not "none"', async () => {
    const wrong = new GeckoTerminalProvider(`${stub.url}/nothing-here`, policy, () => clock.now());
    expect((await failure(wrong, UNKNOWN)).kind).toBe('http_status');
  });

  const cases: Array<[string, ProviderFaults, string]> = [
    ['HTTP 500', { fail: true }, 'http_status'],
    ['pools data: null', { pairsNull: true }, 'pairs_null'],
    ['an empty pool list for a priced token', { empty: true }, 'empty_list'],
    ['numbers where strings are expected', { numbersAsStrings: true }, 'shape'],
    ['the token only as quote token', { quoteTokenOnly: true }, 'quote_token_only'],
    ['missing price_usd', { missingFields: true }, 'shape'],
    ['a body that is not JSON', { invalidJson: true }, 'invalid_json'],
    ['a slow answer', { slowMs: 1000 }, 'timeout'],
  ];
  it.each(cases)('%s is a failure', async (_name, faults, kind) => {
    stub.setFaults({ geckoterminal: faults });
    const err = await failure(gecko);
    expect(err.kind).toBe(kind);
    expect(err.provider).toBe('geckoterminal');
  });
});

describe('failover (MarketData)', () => {
  let market: MarketData;
  beforeAll(() => {
    market = new MarketData([dex, gecko]);
  });

  it('uses DexScreener first and does not ask GeckoTerminal when it answered', async () => {
    const out = await market.lookup(ZOO);
    expect(out.kind === 'market' && out.snapshot.provider).toBe('dexscreener');
    expect(stub.counts()).toEqual({ dexscreener: 1, geckoterminal: 0 });
  });

  it.each<[string, ProviderFaults]>([
    ['fails', { fail: true }],
    ['is slow', { slowMs: 1000 }],
    ['answers an empty list', { empty: true }],
    ['answers pairs: null', { pairsNull: true }],
    ['sends numbers as strings', { numbersAsStrings: true }],
    ['lists the token only as quote token', { quoteTokenOnly: true }],
    ['omits required fields', { missingFields: true }],
  ])('fails over to GeckoTerminal when DexScreener %s', async (_name, faults) => {
    stub.setFaults({ dexscreener: faults });
    const out = await market.lookup(ZOO);
    expect(out.kind).toBe('market');
    if (out.kind !== 'market') return;
    expect(out.snapshot.provider).toBe('geckoterminal');
    expect(out.snapshot.priceUsd).toBe('0.0000012345');
    expect(out.attempts.map((a) => [a.provider, a.outcome])).toEqual([
      ['dexscreener', faults.empty ? 'empty' : 'failed'],
      ['geckoterminal', 'market'],
    ]);
  });

  it('"no market" only when every provider answered cleanly', async () => {
    const out = await market.lookup(UNKNOWN);
    expect(out).toEqual({ kind: 'none', attempts: [{ provider: 'dexscreener', outcome: 'empty' }, { provider: 'geckoterminal', outcome: 'none' }] });
  });

  it.each<[string, { dexscreener?: ProviderFaults; geckoterminal?: ProviderFaults }]>([
    ['DexScreener fails and GeckoTerminal says none', { dexscreener: { fail: true } }],
    ['DexScreener answers pairs: null and GeckoTerminal says none', { dexscreener: { pairsNull: true } }],
    ['DexScreener is empty and GeckoTerminal fails', { geckoterminal: { fail: true } }],
    ['both fail', { dexscreener: { fail: true }, geckoterminal: { fail: true } }],
  ])('unavailable, never "none", when %s', async (_name, faults) => {
    stub.setFaults(faults);
    await expect(market.lookup(UNKNOWN)).rejects.toBeInstanceOf(MarketUnavailableError);
  });

  it('both providers quirky for a listed token: unavailable, with every attempt recorded', async () => {
    stub.setFaults({ dexscreener: { numbersAsStrings: true }, geckoterminal: { quoteTokenOnly: true } });
    const err = await market.lookup(ZOO).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(MarketUnavailableError);
    expect((err as MarketUnavailableError).attempts).toEqual([
      expect.objectContaining({ provider: 'dexscreener', outcome: 'failed', failure: 'shape' }),
      expect.objectContaining({ provider: 'geckoterminal', outcome: 'failed', failure: 'quote_token_only' }),
    ]);
  });
});

describe('answers longer than any market answer', () => {
  it('are not read past 2 MiB: the provider fails (too_large) at once, whether the length is declared or not', async () => {
    const { createServer } = await import('node:http');
    const served: string[] = [];
    const server = createServer((req, res) => {
      served.push(req.url ?? '');
      const declared = req.url?.startsWith('/declared');
      res.writeHead(200, { 'content-type': 'application/json', ...(declared ? { 'content-length': String(3 * 2 ** 20 + 4) } : {}) });
      res.on('error', () => {});
      res.write('["');
      for (let i = 0; i < 3 * 16 && !res.destroyed; i++) res.write('x'.repeat(2 ** 16));
      res.end('"]');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as { port: number };
    try {
      for (const prefix of ['streamed', 'declared']) {
        const huge = new DexScreenerProvider(`http://127.0.0.1:${port}/${prefix}`, { ...policy, timeoutMs: 5000 }, () => clock.now());
        const e = await failure(huge);
        expect(e.kind).toBe('too_large');
      }
      expect(served).toHaveLength(2); // not retried
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
