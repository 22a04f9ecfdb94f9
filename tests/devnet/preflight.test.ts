// The transaction preflight producer against a real chain: anvil as Base with Circle's USDC,
// Uniswap v2 from the npm artifacts and solc-compiled test contracts, one real case per
// finding, every report checked against the published schema and its RPC round trips counted.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPublicClient, http, parseAbi, type Address } from 'viem';
import { baseDevnetChain, freePort, startDevnet, USDC_ADDRESS, type Devnet } from '../../src/devnet/index.js';
import { preflightInputDigest, transactionPreflight, type PreflightInput, type PreflightOptions } from '../../src/features/preflight/preflight.js';
import { preflightRpcCounter } from '../../src/features/preflight/rpc.js';
import { PreflightReport } from '../../src/features/preflight/schemas.js';
import { createChainClient, onBase, UPSTREAM_DETAIL } from '../../src/platform/chain.js';
import { AppError } from '../../src/platform/errors.js';
import { countingChain, mineTo, type CountingChain } from '../helpers/preflight.js';
import { PREFLIGHT_CASE_NAMES, preflightCase, preparePreflightScenarios, type Scenarios } from '../helpers/preflight-scenarios.js';
import { expectMatchesSchema } from '../helpers/schema.js';
import { expectWrongChain, startWrongChainFork } from '../helpers/wrong-chain.js';

const NOW = new Date('2026-01-15T12:00:00.000Z');
let devnet: Devnet;
let sc: Scenarios;
let rpc: CountingChain;
const requestsPerReport: number[] = [];

async function preflight(input: PreflightInput, on: CountingChain = rpc, opts: PreflightOptions = {}) {
  on.reset();
  const counted = preflightRpcCounter.requests;
  const report = await transactionPreflight(on.chain, input, NOW, opts);
  expectMatchesSchema(PreflightReport, report);
  // The exported counter and the HTTP requests seen by fetch agree.
  expect(preflightRpcCounter.requests - counted).toBe(on.methods.length);
  return report;
}

beforeAll(async () => {
  devnet = await startDevnet();
  sc = await preparePreflightScenarios(devnet);
  rpc = countingChain(devnet.rpcUrl);
  // The client's one-time eth_chainId is counted on its own ('an RPC that does not serve Base');
  // the counts below are those of each report.
  await onBase(rpc.chain);
}, 120_000);

afterAll(async () => {
  await devnet?.stop();
});

describe('every finding from a real transaction (eth_simulateV1)', () => {
  it.each(PREFLIGHT_CASE_NAMES)('%s', async (name) => {
    const c = preflightCase(name, sc);
    const report = await preflight(c.input as PreflightInput);
    requestsPerReport.push(rpc.methods.length);
    expect(report.findings.map((f) => f.code)).toEqual(c.codes);
    expect(report.verdict.decision).toBe(c.decision);
    if (c.revertReason) expect(report.simulation.revertReason).toBe(c.revertReason);
    expect(report.simulation.method).toBe('eth_simulateV1');
    expect(report.inputDigest).toBe(preflightInputDigest(c.input as PreflightInput));
    expect(rpc.methods.length).toBeLessThanOrEqual(4);
  });

  it('made at most 4 RPC round trips per report', () => {
    expect(requestsPerReport.length).toBe(PREFLIGHT_CASE_NAMES.length);
    expect(Math.max(...requestsPerReport)).toBeLessThanOrEqual(4);
  });
});

describe('report contents', () => {
  it('a plain USDC transfer: ALLOW, exact asset changes, nothing executed', async () => {
    const pub = createPublicClient({ chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
    const balance = (a: Address) => pub.readContract({ address: USDC_ADDRESS, abi: parseAbi(['function balanceOf(address) view returns (uint256)']), functionName: 'balanceOf', args: [a] });
    const [head, before] = [await pub.getBlockNumber(), await balance(sc.who.sender)];
    const report = await preflight(preflightCase('plain USDC transfer', sc).input as PreflightInput);
    const { sender, recipient } = sc.who;
    expect(report.verdict).toEqual({ decision: 'ALLOW', score: 0, confidence: 'high' });
    expect(report.destination).toEqual({
      address: USDC_ADDRESS, kind: 'contract', codeSize: expect.any(Number), delegate: null, knownAs: 'USDC',
      tokenInfo: { standard: 'erc20', name: 'USD Coin', symbol: 'USDC', decimals: 6, totalSupply: null },
    });
    expect(report.simulation).toMatchObject({
      method: 'eth_simulateV1', sender, senderProvided: true, success: true, revertReason: null, revertData: null, blockNumber: Number(head), traced: true,
      assetChanges: [{ standard: 'erc20', token: USDC_ADDRESS, symbol: 'USDC', decimals: 6, from: sender, to: recipient, amount: '1.5', rawAmount: '1500000' }],
      balanceChanges: [{ address: sender, token: USDC_ADDRESS, symbol: 'USDC', delta: '-1.5' }, { address: recipient, token: USDC_ADDRESS, symbol: 'USDC', delta: '1.5' }],
      logsDecoded: [{ address: USDC_ADDRESS, event: 'Transfer', args: { from: sender, to: recipient, value: '1500000' } }],
    });
    expect(report.simulation.gasUsed).toBeGreaterThan(21_000);
    expect(report.call).toEqual([{ path: '0', target: USDC_ADDRESS, selector: '0xa9059cbb', function: 'transfer(address,uint256)', args: { to: recipient, amount: '1500000' } }]);
    expect(report.checkedAt).toBe(NOW.toISOString());
    // Simulate, trace and the poisoning check's eth_getLogs: three round trips.
    expect(rpc.methods.sort()).toEqual(['debug_traceCall', 'eth_getLogs', 'eth_simulateV1']);
    expect(await pub.getBlockNumber()).toBe(head);
    expect(await balance(sc.who.sender)).toBe(before);
  });

  it('a swap names the router and reads the unseen token in one more call (4 round trips)', async () => {
    const report = await preflight(preflightCase('swap USDC for PFT on Uniswap v2', sc).input as PreflightInput);
    const f = sc.fixtures;
    expect(report.destination).toMatchObject({ kind: 'contract', knownAs: 'Uniswap V2 Router' });
    expect(report.destination.tokenInfo).toBeUndefined();
    expect(report.simulation.assetChanges).toMatchObject([
      { token: USDC_ADDRESS, symbol: 'USDC', from: sc.who.sender, to: f.pairs.usdcToken, amount: '10' },
      { token: f.token, symbol: 'PFT', decimals: 18, from: f.pairs.usdcToken, to: sc.who.sender },
    ]);
    expect(report.simulation.logsDecoded.map((l) => l.event)).toEqual(['Transfer', 'Transfer', 'Sync', 'Swap']);
    expect(rpc.methods.sort()).toEqual(['debug_traceCall', 'eth_call', 'eth_getLogs', 'eth_simulateV1']);
  });

  it('native value appears as transfers (traceTransfers), through WETH into the pool', async () => {
    const report = await preflight(preflightCase('swap ETH for USDC on Uniswap v2', sc).input as PreflightInput);
    const changes = report.simulation.assetChanges.map((c) => [c.symbol, c.from, c.to, c.amount]);
    expect(changes.slice(0, 4)).toEqual([
      ['ETH', sc.who.sender, sc.fixtures.router, '1'],
      ['ETH', sc.fixtures.router, sc.fixtures.weth, '1'],
      ['WETH', '0x0000000000000000000000000000000000000000', sc.fixtures.router, '1'],
      ['WETH', sc.fixtures.router, sc.fixtures.pairs.usdcWeth, '1'],
    ]);
    expect(changes[4]!.slice(0, 3)).toEqual(['USDC', sc.fixtures.pairs.usdcWeth, sc.who.sender]);
  });

  it('kinds: EIP-7702 delegated EOA with its delegate, EOA, precompile; a token and an NFT collection', async () => {
    const delegated = await preflight(preflightCase('EIP-7702 delegated destination sweeping itself', sc).input as PreflightInput);
    expect(delegated.destination).toMatchObject({ kind: 'delegated-eoa', codeSize: 23, delegate: sc.fixtures.delegator });
    expect(delegated.findings[1]!.evidence).toMatchObject({ inSenderContext: true });
    expect(delegated.simulation.assetChanges).toMatchObject([{ standard: 'native', from: sc.who.delegated, to: sc.fixtures.collector }]);
    const eoa = await preflight({ chain: 'base', to: sc.who.recipient, from: sc.who.sender, valueWei: '5' });
    expect(eoa).toMatchObject({ verdict: { decision: 'ALLOW' }, destination: { kind: 'eoa', codeSize: 0, knownAs: null }, findings: [] });
    const pre = await preflight({ chain: 'base', to: '0x0000000000000000000000000000000000000002', from: sc.who.sender, data: '0x1234' });
    expect(pre.destination.kind).toBe('precompile');
    const nft = await preflight(preflightCase('setApprovalForAll to an EOA', sc).input as PreflightInput);
    expect(nft.destination.tokenInfo).toEqual({ standard: 'erc721', name: 'Preflight NFT', symbol: 'PFN', decimals: null, totalSupply: null });
    const pft = await preflight(preflightCase('tokens to the token contract', sc).input as PreflightInput);
    expect(pft.destination.tokenInfo).toEqual({ standard: 'erc20', name: 'Preflight Token', symbol: 'PFT', decimals: 18, totalSupply: '1000000000000000000000000' });
  });

  it('the poisoning finding names the payee the look-alike imitates', async () => {
    const report = await preflight(preflightCase('payment to a poisoned look-alike', sc).input as PreflightInput);
    expect(report.findings[0]!.evidence).toEqual({ recipient: sc.who.lookalike, resembles: [sc.who.payee] });
  });

  it('a provider that caps eth_getLogs ranges gets the poisoning check in pieces within RPC_LOG_BLOCK_RANGE', async () => {
    // A provider that refuses eth_getLogs over more than 100 blocks, mining a block before each of
    // its answers (as Base may meanwhile), and a lookback of about 200 blocks back to the payee's
    // payment: the lookback needs pieces, and the last, which ends at 'latest', must stay within
    // the cap however many blocks arrive meanwhile.
    const head = await mineTo(devnet.rpcUrl, 200n);
    const limited = countingChain(devnet.rpcUrl, [], { maxLogSpan: 100n, mineBeforeLogs: true });
    await onBase(limited.chain);
    const input = preflightCase('payment to a poisoned look-alike', sc).input as PreflightInput;
    const lookback = { poisonLookbackBlocks: Number(head) - 1 };
    // Without a range to keep to, the refusal leaves the check unavailable.
    expect((await preflight(input, limited, lookback)).findings.map((f) => f.code)).toEqual(['poisoning_check_unavailable']);
    const within = await preflight(input, limited, { ...lookback, logBlockRange: 100 });
    expect(within.findings.map((f) => f.code)).toEqual(['recipient_address_poisoning']);
    expect(within.findings[0]!.evidence).toEqual({ recipient: sc.who.lookalike, resembles: [sc.who.payee] });
    // The whole range once (refused), then three pieces in one more round.
    expect(limited.methods.filter((m) => m === 'eth_getLogs')).toHaveLength(4);
  });
});

describe('nodes without eth_simulateV1 or debug_traceCall', () => {
  it('falls back to eth_call + debug_traceCall with the same findings, remembering the missing method', async () => {
    const fb = countingChain(devnet.rpcUrl, ['eth_simulateV1']);
    const names = ['plain USDC transfer', 'revert with a reason', 'ETH to a non-payable function', 'delegatecall into library code', 'USDC pulled by an airdrop drainer', 'payment to a poisoned look-alike', 'ETH beyond the balance'];
    const counts: number[] = [];
    for (const name of names) {
      const c = preflightCase(name, sc);
      const report = await preflight(c.input as PreflightInput, fb);
      counts.push(fb.methods.length);
      expect(report.findings.map((f) => f.code), name).toEqual(c.codes);
      // A sender that cannot pay is refused by the trace too: eth_call gives the outcome.
      expect(report.simulation.method).toBe(name === 'ETH beyond the balance' ? 'eth_call' : 'debug_traceCall');
      if (c.revertReason) expect(report.simulation.revertReason).toBe(c.revertReason);
    }
    // The first report pays for discovering that eth_simulateV1 is missing, and for the client's
    // one eth_chainId (5 + 1); later ones ask neither.
    expect(fb.methods.filter((m) => m === 'eth_simulateV1' || m === 'eth_chainId')).toEqual([]);
    expect(counts[0]).toBe(6);
    expect(Math.max(...counts.slice(1))).toBeLessThanOrEqual(4);
    const plain = await preflight(preflightCase('plain USDC transfer', sc).input as PreflightInput, fb);
    expect(plain.simulation).toMatchObject({ success: true, assetChanges: [{ symbol: 'USDC', amount: '1.5' }], traced: true });
    expect(plain.simulation.blockNumber).toBeGreaterThan(0);
  });

  it('with eth_call alone the outcome is known but not the asset changes: never ALLOW on that', async () => {
    const bare = countingChain(devnet.rpcUrl, ['eth_simulateV1', 'debug_traceCall']);
    const ok = await preflight(preflightCase('plain USDC transfer', sc).input as PreflightInput, bare);
    // A drainer's claim() would also "succeed" here without showing what it moves.
    expect(ok).toMatchObject({ verdict: { decision: 'INCOMPLETE', score: null, confidence: 'low' }, simulation: { method: 'eth_call', success: true, assetChanges: [], traced: false } });
    expect(ok.findings.map((f) => f.code)).toEqual(['simulation_unavailable']);
    expect(ok.findings[0]!.message).toMatch(/asset movements of the transaction are unknown/);
    const reverts = await preflight(preflightCase('revert with a reason', sc).input as PreflightInput, bare);
    expect(reverts.simulation).toMatchObject({ method: 'eth_call', success: false, revertReason: 'vault is closed' });
  });

  it('INCOMPLETE when nothing can simulate; static findings still speak', async () => {
    const none = countingChain(devnet.rpcUrl, ['eth_simulateV1', 'debug_traceCall', 'eth_call']);
    const report = await preflight(preflightCase('plain USDC transfer', sc).input as PreflightInput, none);
    expect(report.verdict).toEqual({ decision: 'INCOMPLETE', score: null, confidence: 'low' });
    expect(report.simulation).toMatchObject({ method: null, success: null, assetChanges: [] });
    expect(report.destination).toMatchObject({ kind: null, knownAs: 'USDC' });
    expect(report.findings.map((f) => f.code)).toEqual(['simulation_unavailable', 'poisoning_check_unavailable']);
    const burn = await preflight(preflightCase('USDC to the dead address', sc).input as PreflightInput, none);
    expect(burn.verdict).toMatchObject({ decision: 'BLOCK', confidence: 'low' });
  });

  it('an unreachable node is a 502 (nothing charged) that leaks no URL', async () => {
    const dead = createChainClient({ rpcUrls: [`http://127.0.0.1:${await freePort()}/v2/sk-secret`], rpcTimeoutMs: 2000 });
    const err = await transactionPreflight(dead, preflightCase('plain USDC transfer', sc).input as PreflightInput, NOW).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: 'upstream_unavailable', status: 502, message: UPSTREAM_DETAIL });
  });
});

describe('an RPC that does not serve Base', () => {
  const swap = () => preflightCase('swap USDC for PFT on Uniswap v2', sc).input as PreflightInput;

  it('the first report on a client also asks eth_chainId, in its first round: 5 requests, one over the budget, once', async () => {
    const fresh = countingChain(devnet.rpcUrl);
    await preflight(swap(), fresh);
    expect(fresh.methods.slice(0, 3).sort()).toEqual(['debug_traceCall', 'eth_chainId', 'eth_simulateV1']);
    expect(fresh.methods.slice(3).sort()).toEqual(['eth_call', 'eth_getLogs']);
    await preflight(swap(), fresh);
    expect(fresh.methods.sort()).toEqual(['debug_traceCall', 'eth_call', 'eth_getLogs', 'eth_simulateV1']);
  });

  it('a fork of Base answering another chain id: 502 before its simulation is used, asked again each time', async () => {
    const fork = await startWrongChainFork(devnet.rpcUrl);
    try {
      const elsewhere = countingChain(fork.rpcUrl);
      for (let i = 0; i < 2; i++) {
        elsewhere.reset();
        expectWrongChain(await transactionPreflight(elsewhere.chain, swap(), NOW).catch((e: unknown) => e));
        // No second round: nothing the fork simulated led to another read.
        expect(elsewhere.methods.sort()).toEqual(['debug_traceCall', 'eth_chainId', 'eth_simulateV1']);
      }
    } finally {
      await fork.stop();
    }
  });
});
