// The token preview and coverage check against a real local Base (anvil, chain 8453, Circle's
// FiatTokenV2_2 at the canonical USDC address, Multicall3) and the market-data stub: the real
// ERC-20 reads batched through Multicall3, the real eth_getCode and storage-slot reads.
import { createPublicClient, http } from 'viem';
import { base } from 'viem/chains';
import { describe, expect, it } from 'vitest';
import { USDC_ADDRESS } from '../../src/devnet/index.js';
import { testConfig } from '../../src/config.js';
import { viemTokenChainReader } from '../../src/features/tokens/chain-reader.js';
import { TokenTools } from '../../src/features/tokens/service.js';
import { createChainClient, onBase } from '../../src/platform/chain.js';
import { ManualClock } from '../../src/platform/clock.js';
import { createMarketData } from '../../src/platform/market/failover.js';
import { usdcFixture } from '../api/token-helpers.js';
import { placeHugeDecimalsToken } from '../helpers/odd-token.js';
import { suiteFixture } from '../helpers/suite.js';
import { expectWrongChain, startWrongChainFork } from '../helpers/wrong-chain.js';
import { startToolsStack } from './tools-helpers.js';

const EOA = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8';
const net = suiteFixture(
  () => startToolsStack({ tokens: () => ({ [USDC_ADDRESS]: usdcFixture() }), clock: new ManualClock('2026-03-01T12:00:00.000Z') }),
  120_000,
);

/** A reader counting its requests; `checked`: the client's one-time eth_chainId is already behind it. */
async function countingReader(checked = true) {
  const counter = { requests: 0 };
  const client = createPublicClient({
    chain: base,
    transport: http(net.devnet.rpcUrl, { onFetchRequest: () => void counter.requests++ }),
  });
  if (checked) await onBase(client);
  counter.requests = 0;
  return { reader: viemTokenChainReader(client), counter };
}

describe('Base reads of the token tools (devnet)', () => {
  it('reads name, symbol and decimals of USDC in ONE request (Multicall3)', async () => {
    const { reader, counter } = await countingReader();
    expect(await reader.identity(USDC_ADDRESS)).toEqual({ name: 'USD Coin', symbol: 'USDC', decimals: 6 });
    expect(counter.requests).toBe(1);
  });

  it('an address without code has no identity and no code', async () => {
    const { reader } = await countingReader();
    expect(await reader.identity(EOA)).toEqual({ name: null, symbol: null, decimals: null });
    expect((await reader.contract(EOA)).codeSize).toBe(0);
  });

  it('a decimals() answer above 255 is unknown (null): the preview publishes maximum 255', async () => {
    const odd = '0x00000000000000000000000000000000dec1dec2';
    await placeHugeDecimalsToken(net.devnet.rpcUrl, odd);
    const { reader } = await countingReader();
    expect(await reader.identity(odd)).toEqual({ name: null, symbol: null, decimals: null });
  });

  it('reads USDC\'s code and proxy slots in three requests', async () => {
    const { reader, counter } = await countingReader();
    const facts = await reader.contract(USDC_ADDRESS);
    expect(facts.codeSize).toBeGreaterThan(1000);
    // The devnet puts the implementation's code at the canonical address directly (no proxy).
    expect(facts).toMatchObject({ cloneTarget: null, delegatedTo: null, eip1967Implementation: null, zosImplementation: null });
    expect(counter.requests).toBe(3);
  });
});

describe('the pool discovery of the coverage check (devnet without Uniswap v2)', () => {
  it('finds no pool in ONE request (Multicall3), as the paid report would', async () => {
    const { reader, counter } = await countingReader();
    expect(await reader.pool(USDC_ADDRESS)).toEqual({ kind: 'none' });
    expect(counter.requests).toBe(1);
  });
});

describe('POST /api/token-preview and /api/token-coverage on the devnet', () => {
  it('previews USDC: DexScreener has no decimals, so they are read on Base', async () => {
    const res = await net.app.inject({ method: 'POST', url: '/api/token-preview', payload: { chain: 'base', address: USDC_ADDRESS } });
    expect(res.statusCode, res.body).toBe(200);
    const out = JSON.parse(res.body);
    expect(out.token).toEqual({ address: USDC_ADDRESS, name: 'USD Coin', symbol: 'USDC', decimals: 6 });
    expect(out.source).toMatchObject({ provider: 'dexscreener', stale: false, limited: false });
    expect(out.market.priceUsd).toBe('0.9998');
  });

  it('covers USDC from cheap reads; this devnet has no Uniswap v2, so, as in the paid report, no simulation', async () => {
    const res = await net.app.inject({ method: 'POST', url: '/api/token-coverage', payload: { chain: 'base', address: USDC_ADDRESS } });
    expect(res.statusCode, res.body).toBe(200);
    const out = JSON.parse(res.body);
    expect(out.coverage.contractCode.status).toBe('available');
    expect(out.coverage.upgradeability).toEqual({ status: 'available', reason: 'proxy slots readable; no EIP-1967 or ZeppelinOS implementation set' });
    expect(out.coverage.identity.status).toBe('available');
    // FiatTokenV2_2 DELEGATECALLs its linked SignatureChecker library: a large contract doing so is not taken for a proxy.
    expect(out.coverage.privilegedFunctions).toEqual({ status: 'available', reason: 'bytecode can be scanned for privileged selectors' });
    // The market stub lists an Aerodrome pair, which the paid report cannot trade through (R5 #4).
    expect(out.coverage.transferSimulation).toEqual({ status: 'unavailable', reason: expect.stringMatching(/^no Uniswap v2 pool/) });
    expect(out.complete).toBe(false);
  });

  it('a listed address without code: the onchain categories are unavailable', async () => {
    net.stub.setToken(EOA, { ...usdcFixture(), name: 'Not A Contract', symbol: 'NAC' });
    const out = JSON.parse((await net.app.inject({ method: 'POST', url: '/api/token-coverage', payload: { chain: 'base', address: EOA } })).body);
    expect(out.coverage.contractCode).toEqual({ status: 'unavailable', reason: 'no contract code at this address on Base' });
    expect(out.coverage.identity).toEqual({ status: 'partial', reason: 'decimals could not be read' });
    expect(out.complete).toBe(false);
  });
});

describe('an RPC that does not serve Base', () => {
  it('the first read on a client also asks eth_chainId, alongside it; later reads do not', async () => {
    const { reader, counter } = await countingReader(false);
    expect(await reader.identity(USDC_ADDRESS)).toMatchObject({ symbol: 'USDC' });
    expect(counter.requests).toBe(2);
    await reader.contract(USDC_ADDRESS);
    await reader.pool(USDC_ADDRESS);
    expect(counter.requests).toBe(2 + 3 + 1);
  });

  it('a fork of Base answering another chain id: every read refused; coverage and preview say Base could not be read', async () => {
    const fork = await startWrongChainFork(net.devnet.rpcUrl);
    try {
      const reader = viemTokenChainReader(createChainClient({ rpcUrls: [fork.rpcUrl], rpcTimeoutMs: 5000 }));
      for (const read of [reader.identity, reader.contract, reader.pool]) expectWrongChain(await read(USDC_ADDRESS).catch((e: unknown) => e));

      const config = testConfig({ marketDexscreenerUrl: net.stub.dexscreenerUrl, marketGeckoterminalUrl: net.stub.geckoterminalUrl });
      const clock = new ManualClock('2026-03-01T12:00:00.000Z');
      const tools = new TokenTools(createMarketData(config, clock), reader, clock);
      const coverage = await tools.coverage(USDC_ADDRESS);
      expect(coverage.coverage.contractCode).toEqual({ status: 'unavailable', reason: 'Base could not be read just now' });
      expect(coverage.coverage.transferSimulation).toEqual({ status: 'unavailable', reason: 'Base could not be read just now' });
      // DexScreener has no decimals: the fork's answer is not taken for Base's.
      expect((await tools.preview(USDC_ADDRESS)).token).toEqual({ address: USDC_ADDRESS, name: 'USD Coin', symbol: 'USDC', decimals: null });
    } finally {
      await fork.stop();
    }
  });
});
