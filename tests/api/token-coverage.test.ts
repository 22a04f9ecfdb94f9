import { getAddress } from 'viem';
import { beforeEach, describe, expect, it } from 'vitest';
import { json } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import { suiteFixture } from '../helpers/suite.js';
import { UNKNOWN, ZOO, body, createTokenApp, freshZooToken, plainFacts, usablePool, zooFixture } from './token-helpers.js';

const URL = '/api/token-coverage';
const S = 1000;
const CATEGORIES = ['identity', 'market', 'liquidity', 'contractCode', 'ownership', 'upgradeability', 'privilegedFunctions', 'transferSimulation', 'holderConcentration'];
const IMPL = getAddress('0x1234567890abcdef1234567890abcdef12345678');

describe('POST /api/token-coverage', () => {
  const t = suiteFixture(() => createTokenApp({ marketTimeoutMs: 300 }));
  let n = 0;
  let token: string;
  beforeEach(() => {
    token = freshZooToken(t, 0x2000 + ++n);
    t.chain.facts = plainFacts();
    t.chain.poolAnswer = usablePool();
    t.chain.contractCalls = 0;
  });

  const coverage = (address = token) => t.post(URL, body(address));
  const statuses = (out: any) => Object.fromEntries(CATEGORIES.map((c) => [c, out.coverage[c].status]));

  it('answers per-category coverage, complete, checkedAt and the fee disclosure', async () => {
    const res = await coverage();
    expect(res.statusCode, res.body).toBe(200);
    const out = json(res);
    expect(Object.keys(out.coverage)).toEqual(CATEGORIES);
    for (const c of CATEGORIES) {
      expect(['available', 'partial', 'unavailable']).toContain(out.coverage[c].status);
      expect(out.coverage[c].reason.length).toBeGreaterThan(5);
    }
    expect(statuses(out)).toEqual({
      identity: 'available',
      market: 'available',
      liquidity: 'available',
      contractCode: 'available',
      ownership: 'available',
      upgradeability: 'available',
      privilegedFunctions: 'available',
      transferSimulation: 'available',
      holderConcentration: 'partial',
    });
    expect(out.complete).toBe(true);
    expect(out.checkedAt).toBe(t.clock.now().toISOString());
    expect(out.token).toEqual({ address: token });
    expect(out.source).toMatchObject({ provider: 'dexscreener', stale: false, limited: false });
    expect(out.fee).toEqual({
      report: '/api/token-risk',
      price: '0.25',
      asset: 'USDC',
      network: 'eip155:8453',
      chargedEvenWhenIncomplete: true,
      note: expect.stringMatching(/charged even when it is INCOMPLETE/),
    });
    expect(out.coverage.liquidity.reason).toContain('15000.5 USD');
    expect(t.chain.contractCalls).toBe(1);
  });

  it('is cached for up to 60 s per token, then checked again', async () => {
    const first = json(await coverage());
    t.chain.facts = plainFacts({ codeSize: 0 });
    t.clock.advance(60 * S);
    const cached = json(await coverage());
    expect(cached).toEqual(first);
    expect(t.chain.contractCalls).toBe(1);
    t.clock.advance(1);
    const again = json(await coverage());
    expect(again.checkedAt).toBe(t.clock.now().toISOString());
    expect(again.coverage.contractCode.status).toBe('unavailable');
    expect(t.chain.contractCalls).toBe(2);
    // Per token: another token is checked on its own.
    expect(json(await coverage(ZOO)).checkedAt).toBe(t.clock.now().toISOString());
    expect(t.chain.contractCalls).toBe(3);
    // A system clock stepped back: the cached answer's age is unknown, so it is checked again.
    t.clock.advance(-3600 * S);
    expect(json(await coverage()).checkedAt).toBe(t.clock.now().toISOString());
    expect(t.chain.contractCalls).toBe(4);
  });

  it('no contract code: the onchain categories are unavailable and the check is not complete', async () => {
    t.chain.facts = plainFacts({ codeSize: 0 });
    const out = json(await coverage());
    expect(statuses(out)).toMatchObject({
      contractCode: 'unavailable',
      ownership: 'unavailable',
      upgradeability: 'unavailable',
      privilegedFunctions: 'unavailable',
      transferSimulation: 'unavailable',
      holderConcentration: 'unavailable',
    });
    expect(out.coverage.contractCode.reason).toMatch(/no contract code/);
    expect(out.complete).toBe(false);
  });

  it('an EIP-1967 proxy: the implementation is named and can be scanned', async () => {
    t.chain.facts = plainFacts({ codeSize: 180, delegatecall: true, eip1967Implementation: IMPL });
    const out = json(await coverage());
    expect(out.coverage.upgradeability).toEqual({ status: 'available', reason: `EIP-1967 proxy; implementation ${IMPL}` });
    expect(out.coverage.privilegedFunctions.status).toBe('available');
    expect(out.coverage.privilegedFunctions.reason).toContain(IMPL);
    expect(out.complete).toBe(true);
  });

  it('a ZeppelinOS proxy (like Base USDC) is recognized too', async () => {
    t.chain.facts = plainFacts({ codeSize: 1500, delegatecall: true, zosImplementation: IMPL });
    expect(json(await coverage()).coverage.upgradeability.reason).toBe(`ZeppelinOS proxy; implementation ${IMPL}`);
  });

  it('delegatecall to code named in no standard slot: privileged functions only partially', async () => {
    t.chain.facts = plainFacts({ codeSize: 300, delegatecall: true });
    const out = json(await coverage());
    expect(out.coverage.privilegedFunctions.status).toBe('partial');
    expect(out.complete).toBe(false);
  });

  it('transfer simulation follows the paid report\'s Uniswap v2 pool, not the market\'s pairs (R5 #4)', async () => {
    // Liquid pairs in the market data (for example on Aerodrome), but no v2 pool against WETH or USDC:
    // the paid report would be INCOMPLETE, so the check must not say complete.
    t.chain.poolAnswer = { kind: 'none' };
    let out = json(await coverage());
    expect(out.coverage.liquidity.status).toBe('available');
    expect(out.coverage.transferSimulation).toEqual({ status: 'unavailable', reason: expect.stringMatching(/^no Uniswap v2 pool with reserves against WETH or USDC/) });
    expect(out.complete).toBe(false);

    t.clock.advance(61 * S);
    t.chain.poolAnswer = { kind: 'shallow', pools: [{ pair: '0x5a000000000000000000000000000000000000b2', quote: 'WETH', reserveToken: 10n ** 18n, reserveQuote: 100n, quoteValueUsdc: 0n }] };
    out = json(await coverage());
    expect(out.coverage.transferSimulation).toEqual({ status: 'partial', reason: expect.stringMatching(/too shallow.*0x5a000000000000000000000000000000000000b2.*INCOMPLETE/) });
    expect(out.complete).toBe(false);

    // Conversely, a pool deep enough makes it available whatever the market data says.
    t.clock.advance(61 * S);
    t.chain.poolAnswer = usablePool();
    const fixture = zooFixture();
    fixture.pairs = fixture.pairs.map((p) => ({ ...p, liquidityUsd: '0' }));
    t.stub.setToken(token, fixture);
    out = json(await coverage());
    expect(out.coverage.transferSimulation).toEqual({ status: 'available', reason: expect.stringContaining('0x5a000000000000000000000000000000000000b1 against USDC') });
  });

  it('identity fields no source could give make identity partial', async () => {
    t.chain.identityAnswer = { name: null, symbol: null, decimals: null };
    const out = json(await coverage()); // DexScreener has name and symbol, no decimals
    expect(out.coverage.identity).toEqual({ status: 'partial', reason: 'decimals could not be read' });
    expect(out.complete).toBe(false);
    t.chain.identityAnswer = { name: 'Zoo Token', symbol: 'ZOO', decimals: 18 };
  });

  it('during a provider outage: market partial then unavailable, liquidity unavailable; then 502', async () => {
    await t.post('/api/token-preview', body(token));
    t.stub.setFaults({ dexscreener: { fail: true }, geckoterminal: { fail: true } });
    t.clock.advance(120 * S);
    let out = json(await coverage());
    expect(out.source).toMatchObject({ stale: true, limited: false, ageSeconds: 120 });
    expect(statuses(out)).toMatchObject({ identity: 'available', market: 'partial', liquidity: 'unavailable', contractCode: 'available' });
    expect(out.coverage.liquidity.reason).toMatch(/never use stale data/);
    expect(out.complete).toBe(false);

    t.clock.advance(1000 * S);
    out = json(await coverage());
    expect(out.source).toMatchObject({ stale: true, limited: true });
    // The pool is read on Base, so a market-data outage does not touch transferSimulation.
    expect(statuses(out)).toMatchObject({ identity: 'available', market: 'unavailable', liquidity: 'unavailable', transferSimulation: 'available' });

    t.clock.advance(86_400 * S);
    expectProblem(await coverage(), 502, 'upstream_unavailable');
  });

  it('Base unreadable: onchain categories unavailable, and that answer is not cached', async () => {
    t.chain.failing = true;
    const out = json(await coverage());
    expect(out.coverage.contractCode).toEqual({ status: 'unavailable', reason: 'Base could not be read just now' });
    expect(out.complete).toBe(false);
    t.chain.failing = false;
    const again = json(await coverage());
    expect(again.coverage.contractCode.status).toBe('available');
    expect(t.chain.contractCalls).toBe(2);
  });

  it('404 when no provider lists a Base pair; 502 when a provider failed', async () => {
    expectProblem(await coverage(UNKNOWN), 404, 'no_trading_pair');
    t.stub.setFaults({ geckoterminal: { fail: true } });
    t.clock.advance(31 * S); // past the 30 s reuse of the clean "none"
    expectProblem(await coverage(UNKNOWN), 502, 'upstream_unavailable');
  });

  it('400 for an invalid Base token address', async () => {
    expectInvalid(await t.post(URL, { chain: 'base', address: '0xnothex' }), 'body/address');
    expectInvalid(await t.post(URL, { chain: 'base', address: ZOO, more: true }), 'body/more');
    expect(t.chain.contractCalls).toBe(0);
  });
});

describe('POST /api/token-coverage rate limit', () => {
  const t = suiteFixture(() => createTokenApp({ rateLimits: true }));

  it('60 per 3600 s per source, then 429 with Retry-After', async () => {
    for (let i = 0; i < 60; i++) expect((await t.post(URL, body(ZOO))).statusCode).toBe(200);
    const res = await t.post(URL, body(ZOO));
    const problem = expectProblem(res, 429, 'rate_limited');
    expect(Number(res.headers['retry-after'])).toBeGreaterThan(3500);
    expect(problem.title).toBe('Per-source free coverage limit reached');
    expect((await t.post('/api/token-preview', body(ZOO))).statusCode).toBe(200);
  });
});
