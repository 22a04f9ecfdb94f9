// The token-risk collector and scorer against the real devnet, without payment: every zoo token,
// then variants made with anvil cheats (clones, EIP-7702, ZeppelinOS and beacon proxies, unknown
// delegation, a paused token, a raised fee), market lookups, the RPC budget and a dead RPC.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestClient, createWalletClient, getAddress, http, maxUint256, pad, parseEther, type Abi, type Address, type Hex } from 'viem';
import { baseDevnetChain, freePort, startDevnet, type Devnet, type ZooDeployment } from '../../src/devnet/index.js';
import { zooOwnerCall, zooTokenAbi, ZOO_FEE_BPS } from '../../src/devnet/zoo/index.js';
import { uniswapAbi } from '../../src/devnet/zoo/uniswap.js';
import { PROXY_SLOTS } from '../../src/features/token-risk/collect.js';
import type { TokenRiskEvidence } from '../../src/features/token-risk/evidence.js';
import type { MarketLookupResult } from '../../src/features/token-risk/market.js';
import { tokenRisk, type TokenRiskOptions } from '../../src/features/token-risk/report.js';
import { readSlots, type RpcMeter } from '../../src/features/token-risk/rpc.js';
import { TokenRiskReport } from '../../src/features/token-risk/schemas.js';
import { UPSTREAM_DETAIL, createChainClient, onBase, type ChainClient } from '../../src/platform/chain.js';
import { AppError } from '../../src/platform/errors.js';
import { expectMatchesSchema } from '../helpers/schema.js';
import { expectWrongChain, startWrongChainFork } from '../helpers/wrong-chain.js';

const NOW = new Date('2026-01-15T12:00:00.000Z');
let devnet: Devnet;
let zoo: ZooDeployment;
let chain: ChainClient;
let test: ReturnType<typeof createTestClient>;
let spare = 0x1000;

/** A fresh address for anvil cheats. */
const fresh = (): Address => getAddress(`0x${(spare++).toString(16).padStart(40, 'c')}`);

async function report(address: string, opts: TokenRiskOptions = {}) {
  let meter: RpcMeter | undefined;
  let evidence: TokenRiskEvidence | undefined;
  const r = await tokenRisk(chain, { chain: 'base', address }, NOW, { ...opts, onMeter: (m) => (meter = m), onEvidence: (e) => (evidence = e) });
  // Every report must satisfy its published schema (declaring every property it carries), and
  // the budget of 12 RPC requests.
  expectMatchesSchema(TokenRiskReport, r);
  expect(meter!.requests).toBeLessThanOrEqual(12);
  expect(meter!.rounds).toBeLessThanOrEqual(3);
  return { r, meter: meter!, evidence: evidence! };
}
const codes = (r: TokenRiskReport) => Object.values(r.risk.breakdown).flatMap((b) => b.findings.map((f) => f.code));
const findingOf = (r: TokenRiskReport, code: string) => Object.values(r.risk.breakdown).flatMap((b) => b.findings).find((f) => f.code === code);

beforeAll(async () => {
  devnet = await startDevnet({ zoo: true });
  zoo = devnet.zoo!;
  chain = createChainClient({ rpcUrls: [devnet.rpcUrl], rpcTimeoutMs: 5000 });
  // The client's one-time eth_chainId is measured on its own ('an RPC that does not serve Base');
  // the counts below are those of each report.
  await onBase(chain);
  test = createTestClient({ mode: 'anvil', chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
});
afterAll(async () => {
  await devnet?.stop();
});

describe('every zoo token (no market data configured)', () => {
  const expected = {
    honest: { decision: 'ALLOW', level: 'low', reasons: [] },
    mintable: { decision: 'WARN', level: 'high', reasons: ['mint_function', 'owner_supply_share'] },
    pausable: { decision: 'WARN', level: 'high', reasons: ['pause_function', 'owner_supply_share'] },
    blacklist: { decision: 'WARN', level: 'high', reasons: ['blacklist_function', 'owner_supply_share'] },
    proxy: { decision: 'WARN', level: 'high', reasons: ['upgradeable_proxy', 'owner_supply_share'] },
    'fee-on-transfer': { decision: 'WARN', level: 'high', reasons: ['fee_setter', 'buy_tax', 'transfer_tax', 'sell_tax', 'owner_supply_share'] },
    honeypot: { decision: 'BLOCK', level: 'critical', reasons: ['sell_reverts'] },
    'no-liquidity': { decision: 'INCOMPLETE', level: 'unknown', reasons: ['transferSimulation_unavailable'] },
  } as const;
  it.each(Object.entries(expected))('%s', async (behaviour, verdict) => {
    const { r, meter } = await report(zoo.tokens[behaviour as keyof typeof expected]);
    expect(r.verdict).toMatchObject(verdict);
    expect(r.token).toMatchObject({ chain: 'base', address: zoo.tokens[behaviour as keyof typeof expected], decimals: 18, codePresent: true, totalSupply: expect.any(String) });
    expect(r.risk.coverage.liquidity.status).toBe('unavailable');
    expect(meter.rounds).toBeLessThanOrEqual(2);
  });

  it('honest: ALLOW with the pool, zero taxes and renounced ownership as evidence', async () => {
    const { r, meter } = await report(zoo.tokens.honest);
    expect(r.verdict).toEqual({ decision: 'ALLOW', level: 'low', score: 0, confidence: 'medium', reasons: [] });
    expect(r.simulation).toMatchObject({ pair: zoo.details.honest.pool!.pair, quote: { symbol: 'WETH' }, buy: { status: 'ok', taxPercent: '0.00' }, transfer: { status: 'ok', taxPercent: '0.00' }, sell: { status: 'ok', taxPercent: '0.00' } });
    expect(findingOf(r, 'owner_renounced')!.evidence).toEqual({ owner: '0x0000000000000000000000000000000000000000', function: 'owner()' });
    expect(meter).toEqual({ requests: 4, rounds: 2 });
  });

  it('fee-on-transfer: the measured taxes are 10% (the sell a hair less, through the curve)', async () => {
    const { r } = await report(zoo.tokens['fee-on-transfer']);
    expect(findingOf(r, 'buy_tax')).toMatchObject({ severity: 'medium', evidence: { taxPercent: '10.00', quote: 'WETH' } });
    expect(findingOf(r, 'transfer_tax')).toMatchObject({ severity: 'medium', evidence: { taxPercent: '10.00' } });
    const sellTax = Number(findingOf(r, 'sell_tax')!.evidence.taxPercent);
    expect(sellTax).toBeGreaterThan(9.9);
    expect(sellTax).toBeLessThanOrEqual(10);
    expect(findingOf(r, 'fee_setter')!.evidence.selectors).toEqual(['0x69fe0e2d setFee(uint256)', '0x437823ec excludeFromFee(address)']);
  });

  it('honeypot: BLOCK on the reverted sell, with the revert reason; buy and transfer worked', async () => {
    const { r } = await report(zoo.tokens.honeypot);
    expect(r.simulation).toMatchObject({ buy: { status: 'ok' }, transfer: { status: 'ok' }, sell: { status: 'reverted', reason: 'TransferHelper: TRANSFER_FROM_FAILED' } });
    expect(findingOf(r, 'sell_reverts')).toMatchObject({ severity: 'critical', evidence: { reason: 'TransferHelper: TRANSFER_FROM_FAILED', quote: 'WETH' } });
    expect(r.verdict.confidence).toBe('high');
  });

  it('proxy: the implementation and the admin are evidence; the implementation bytecode is scanned', async () => {
    const { r, evidence, meter } = await report(zoo.tokens.proxy);
    expect(findingOf(r, 'upgradeable_proxy')!.evidence).toMatchObject({ standard: 'EIP-1967', implementation: zoo.details.proxy.implementation, admin: zoo.details.proxy.proxyAdmin });
    expect(evidence.upgradeability.logic).toMatchObject({ address: zoo.details.proxy.implementation, source: 'eip1967' });
    expect(r.risk.coverage.privileges.reason).toMatch(/implementation/);
    expect(meter).toEqual({ requests: 7, rounds: 2 });
  });

  it('mintable trades through its USDC pool, funded by a state override', async () => {
    const { r } = await report(zoo.tokens.mintable);
    expect(r.simulation).toMatchObject({ quote: { symbol: 'USDC', decimals: 6 }, buy: { status: 'ok', taxPercent: '0.00' }, sell: { status: 'ok', taxPercent: '0.00' } });
    expect(findingOf(r, 'mint_function')!.evidence).toMatchObject({ selectors: ['0x40c10f19 mint(address,uint256)'], controllable: true });
    expect(findingOf(r, 'owner_active')!.evidence).toMatchObject({ owner: zoo.deployer, ownerIsContract: false });
  });

  it('no-liquidity: INCOMPLETE with a null score, because no pool lets a sell be simulated', async () => {
    const { r, meter } = await report(zoo.tokens['no-liquidity']);
    expect(r.verdict).toEqual({ decision: 'INCOMPLETE', level: 'unknown', score: null, confidence: 'low', reasons: ['transferSimulation_unavailable'] });
    expect(r.risk.coverage.transferSimulation.reason).toMatch(/no Uniswap v2 pool/);
    expect(r.simulation).toBeNull();
    expect(meter).toEqual({ requests: 3, rounds: 1 });
  });
});

describe('other addresses', () => {
  it('an externally owned account: BLOCK no_contract_code, in one round of 3 requests', async () => {
    const { r, meter } = await report(devnet.accounts[3]!.address);
    expect(r.verdict).toEqual({ decision: 'BLOCK', level: 'critical', score: 80, confidence: 'high', reasons: ['no_contract_code'] });
    expect(r.token).toMatchObject({ codePresent: false, totalSupply: null, name: null });
    expect(meter).toEqual({ requests: 3, rounds: 1 });
  });

  it('a contract that is not a token (the router): BLOCK not_erc20', async () => {
    expect((await report(zoo.router)).r.verdict.reasons).toEqual(['not_erc20']);
  });

  it('USDC itself (FiatTokenV2_2 on the devnet): WARN for mint, pause and blacklist, traded against WETH', async () => {
    const { r } = await report(zoo.usdc);
    expect(r.verdict.decision).toBe('WARN');
    expect(r.verdict.reasons).toEqual(expect.arrayContaining(['mint_function', 'pause_function', 'blacklist_function']));
    expect(r.simulation).toMatchObject({ pair: zoo.wethUsdcPair, quote: { symbol: 'WETH' }, sell: { status: 'ok' } });
  });

  it('accepts any letter case and answers with the checksummed address', async () => {
    const { r } = await report(zoo.tokens.honest.toLowerCase());
    expect(r.token.address).toBe(zoo.tokens.honest);
  });
});

describe('variants made with anvil cheats', () => {
  const codeOf = async (a: Address) => (await chain.getCode({ address: a }))!;

  it('reads storage slots in one call through a code override (the slot reader)', async () => {
    const words = await readSlots(chain, zoo.tokens.proxy, [PROXY_SLOTS.implementation, PROXY_SLOTS.admin, PROXY_SLOTS.beacon]);
    expect(words[0]).toBe(pad(zoo.details.proxy.implementation!.toLowerCase() as Hex, { size: 32 }));
    expect(words[1]).toBe(pad(zoo.details.proxy.proxyAdmin!.toLowerCase() as Hex, { size: 32 }));
    expect(BigInt(words[2]!)).toBe(0n);
  });

  it('a paused token: BLOCK transfers_paused (and the buy reverts)', async () => {
    await zooOwnerCall(devnet.rpcUrl, zoo.tokens.pausable, 'pause');
    try {
      const { r } = await report(zoo.tokens.pausable);
      expect(r.verdict.decision).toBe('BLOCK');
      expect(r.verdict.reasons).toContain('transfers_paused');
      expect(r.simulation!.buy.status).toBe('reverted');
    } finally {
      await zooOwnerCall(devnet.rpcUrl, zoo.tokens.pausable, 'unpause');
    }
  });

  it('a blacklisted pool: the buy reverts, the sell cannot be tested, INCOMPLETE', async () => {
    const pair = zoo.details.blacklist.pool!.pair;
    await zooOwnerCall(devnet.rpcUrl, zoo.tokens.blacklist, 'blacklist', [pair]);
    try {
      const { r } = await report(zoo.tokens.blacklist);
      expect(r.verdict.decision).toBe('INCOMPLETE');
      expect(r.verdict.reasons).toEqual(['transferSimulation_partial']);
      expect(findingOf(r, 'buy_reverts')!.evidence.reason).toMatch(/custom error|UniswapV2/);
      expect(r.simulation).toMatchObject({ transfer: { status: 'skipped' }, sell: { status: 'skipped' } });
    } finally {
      await zooOwnerCall(devnet.rpcUrl, zoo.tokens.blacklist, 'unBlacklist', [pair]);
    }
  });

  it('a 60% fee: BLOCK on a sell returning almost nothing, after re-sizing the simulation (3 rounds)', async () => {
    await zooOwnerCall(devnet.rpcUrl, zoo.tokens['fee-on-transfer'], 'setFee', [6000n]);
    try {
      const { r, meter } = await report(zoo.tokens['fee-on-transfer']);
      expect(r.verdict.decision).toBe('BLOCK');
      expect(findingOf(r, 'sell_tax')).toMatchObject({ severity: 'critical', title: expect.stringMatching(/^Honeypot/) });
      expect(findingOf(r, 'buy_tax')!.evidence.taxPercent).toBe('60.00');
      expect(meter).toEqual({ requests: 7, rounds: 3 });
    } finally {
      await zooOwnerCall(devnet.rpcUrl, zoo.tokens['fee-on-transfer'], 'setFee', [ZOO_FEE_BPS]);
    }
  });

  it('an EIP-1167 clone: info finding, the implementation is scanned', async () => {
    const clone = fresh();
    await test.setCode({ address: clone, bytecode: `0x363d3d373d3d3d363d73${zoo.tokens.mintable.slice(2).toLowerCase()}5af43d82803e903d91602b57fd5bf3` });
    const { r, evidence } = await report(clone);
    expect(findingOf(r, 'minimal_proxy_clone')!.evidence).toEqual({ implementation: zoo.tokens.mintable });
    expect(evidence.upgradeability.logic).toMatchObject({ source: 'eip1167', address: zoo.tokens.mintable });
    expect(codes(r)).toContain('mint_function');
    expect(r.verdict.decision).toBe('INCOMPLETE'); // a fresh clone has no pool
  });

  it('an EIP-7702 delegated account: high finding, the delegate is scanned', async () => {
    const eoa = devnet.accounts[9]!.address;
    await test.setCode({ address: eoa, bytecode: `0xef0100${zoo.tokens.blacklist.slice(2).toLowerCase()}` });
    try {
      const { r, evidence } = await report(eoa);
      expect(findingOf(r, 'eip7702_delegated_account')!.evidence).toEqual({ delegate: zoo.tokens.blacklist });
      expect(evidence.contract.kind).toBe('eip7702');
      expect(codes(r)).toContain('blacklist_function');
    } finally {
      await test.setCode({ address: eoa, bytecode: '0x' });
    }
  });

  it('a ZeppelinOS proxy: upgradeable_proxy with the ZeppelinOS slots', async () => {
    const proxy = fresh();
    await test.setCode({ address: proxy, bytecode: await codeOf(zoo.tokens.honest) });
    await test.setStorageAt({ address: proxy, index: PROXY_SLOTS.zosImplementation, value: pad(zoo.tokens.pausable, { size: 32 }) });
    await test.setStorageAt({ address: proxy, index: PROXY_SLOTS.zosAdmin, value: pad(zoo.deployer, { size: 32 }) });
    const { r } = await report(proxy);
    expect(findingOf(r, 'upgradeable_proxy')!.evidence).toMatchObject({ standard: 'ZeppelinOS', implementation: zoo.tokens.pausable, admin: zoo.deployer });
    expect(codes(r)).toContain('pause_function');
  });

  it('an EIP-1967 beacon proxy: the beacon names the implementation (one extra round)', async () => {
    const beacon = fresh();
    const proxy = fresh();
    // implementation() of the beacon: PUSH20 <impl> PUSH1 0 MSTORE PUSH1 32 PUSH1 0 RETURN
    await test.setCode({ address: beacon, bytecode: `0x73${zoo.tokens.mintable.slice(2).toLowerCase()}60005260206000f3` });
    await test.setCode({ address: proxy, bytecode: await codeOf(zoo.tokens.honest) });
    await test.setStorageAt({ address: proxy, index: PROXY_SLOTS.beacon, value: pad(beacon, { size: 32 }) });
    const { r, meter } = await report(proxy);
    expect(findingOf(r, 'beacon_proxy')!.evidence).toEqual({ beacon, implementation: zoo.tokens.mintable });
    expect(codes(r)).toContain('mint_function');
    expect(meter.rounds).toBe(3);
  });

  it('code that delegates to an unknown target: unknown_delegation, privileges unavailable, INCOMPLETE', async () => {
    const proxy = fresh();
    // A non-standard clone (not the EIP-1167 byte pattern) delegating to the honest token.
    await test.setCode({ address: proxy, bytecode: `0x3d3d3d3d363d3d37363d73${zoo.tokens.honest.slice(2).toLowerCase()}5af43d3d93803e602a57fd5bf3` });
    const { r } = await report(proxy);
    expect(codes(r)).toContain('unknown_delegation');
    expect(r.risk.coverage.privileges.status).toBe('unavailable');
    expect(r.verdict.decision).toBe('INCOMPLETE');
  });
});

describe('the pool the simulation trades through', () => {
  /** Adds a token/WETH pool as anyone holding a few tokens could (the zoo's deployer holds them), inside an anvil snapshot. */
  async function withWethPool(token: Address, tokenSide: bigint, wei: bigint, check: () => Promise<void>) {
    const snapshot = await test.snapshot();
    try {
      await test.impersonateAccount({ address: zoo.deployer });
      const wallet = createWalletClient({ chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl), account: zoo.deployer });
      const send = async (address: Address, abi: Abi, functionName: string, args: unknown[], value?: bigint) =>
        chain.waitForTransactionReceipt({ hash: await wallet.writeContract({ address, abi, functionName, args, ...(value ? { value } : {}) } as never) });
      await send(token, zooTokenAbi, 'approve', [zoo.router, maxUint256]);
      await send(zoo.router, uniswapAbi, 'addLiquidityETH', [token, tokenSide, 0n, 0n, zoo.deployer, maxUint256], wei);
      await check();
    } finally {
      await test.stopImpersonatingAccount({ address: zoo.deployer });
      await test.revert({ id: snapshot });
    }
  }

  it('a 100-wei WETH pool beside a deep USDC pool changes nothing: the USDC pool is simulated (R5 #2)', async () => {
    const before = (await report(zoo.tokens.mintable)).r;
    await withWethPool(zoo.tokens.mintable, parseEther('1'), 100n, async () => {
      const { r } = await report(zoo.tokens.mintable);
      // (the score moves a hair: the owner put one token into the pool)
      expect(r.verdict).toMatchObject({ decision: before.verdict.decision, level: before.verdict.level, reasons: before.verdict.reasons });
      expect(r.simulation).toMatchObject({ pair: zoo.details.mintable.pool!.pair, quote: { symbol: 'USDC' }, sell: { status: 'ok', taxPercent: '0.00' } });
      expect(codes(r)).not.toContain('sell_reverts');
    });
  });

  it('depth is compared in USD: 5 WETH (15,000 USD at the WETH/USDC pool) loses to 25,000 USDC, 10 WETH wins', async () => {
    await withWethPool(zoo.tokens.mintable, parseEther('100000'), parseEther('5'), async () => {
      expect((await report(zoo.tokens.mintable)).r.simulation!.quote.symbol).toBe('USDC');
    });
    await withWethPool(zoo.tokens.mintable, parseEther('200000'), parseEther('10'), async () => {
      const { r, evidence } = await report(zoo.tokens.mintable);
      expect(r.simulation).toMatchObject({ quote: { symbol: 'WETH' }, reserves: { quote: parseEther('10').toString() }, sell: { status: 'ok' } });
      expect(evidence.holders.pool).toBe(parseEther('200000'));
      expect(r.verdict.decision).toBe('WARN');
    });
  });

  it('a token whose only pool is dust is INCOMPLETE (pool too shallow), never a honeypot', async () => {
    await withWethPool(zoo.tokens['no-liquidity'], parseEther('1'), 100n, async () => {
      const { r, evidence } = await report(zoo.tokens['no-liquidity']);
      expect(r.verdict).toMatchObject({ decision: 'INCOMPLETE', reasons: ['transferSimulation_partial'] });
      expect(r.risk.coverage.transferSimulation.reason).toMatch(/too shallow/);
      expect(evidence.simulation).toMatchObject({ status: 'pool_too_shallow', pools: [{ quote: 'WETH', reserveQuote: 100n }] });
      expect(r.simulation).toBeNull();
    });
  });
});

describe('market data for the liquidity category', () => {
  const snapshot = (liquidityUsd: string | null) => ({
    provider: 'dexscreener',
    fetchedAt: NOW,
    liquidityUsd,
    pairs: [{ dex: 'uniswap', pairAddress: zoo.details.honest.pool!.pair, quoteToken: { address: zoo.weth, symbol: 'WETH' }, liquidityUsd }],
  });
  const lookup = (res: MarketLookupResult | Error) => async () => {
    if (res instanceof Error) throw res;
    return res;
  };

  it('fresh data with deep liquidity: honest is ALLOW with high confidence', async () => {
    const { r } = await report(zoo.tokens.honest, { market: lookup({ kind: 'market', snapshot: snapshot('60000.5') }) });
    expect(r.verdict).toMatchObject({ decision: 'ALLOW', confidence: 'high' });
    expect(findingOf(r, 'low_liquidity')).toMatchObject({ severity: 'low', evidence: { liquidityUsd: '60000.5' } });
  });

  it('thin liquidity turns an otherwise clean token into WARN', async () => {
    const { r } = await report(zoo.tokens.honest, { market: lookup({ kind: 'market', snapshot: snapshot('500') }) });
    expect(r.verdict).toMatchObject({ decision: 'WARN', reasons: ['low_liquidity'] });
  });

  it('stale or failing market data is never used, and never fails the report', async () => {
    for (const [res, reason] of [
      [{ kind: 'market', snapshot: snapshot('60000'), stale: true }, /stale/],
      [new Error('provider down'), /did not answer/],
    ] as const) {
      const { r } = await report(zoo.tokens.honest, { market: lookup(res as MarketLookupResult | Error) });
      expect(r.risk.coverage.liquidity).toMatchObject({ status: 'unavailable', reason: expect.stringMatching(reason) });
      expect(r.verdict).toMatchObject({ decision: 'ALLOW', confidence: 'medium' });
    }
  });

  it('the market saying "no pair" for the no-liquidity token adds no_market; it stays INCOMPLETE', async () => {
    const { r } = await report(zoo.tokens['no-liquidity'], { market: lookup({ kind: 'none' }) });
    expect(codes(r)).toContain('no_market');
    expect(r.verdict.decision).toBe('INCOMPLETE');
  });
});

describe('an unreadable chain', () => {
  it('is a 502 upstream error that never shows the RPC URL', async () => {
    const dead = createChainClient({ rpcUrls: [`http://127.0.0.1:${await freePort()}/v2/sk-secret-rpc-key`], rpcTimeoutMs: 1000 });
    const err = await tokenRisk(dead, { chain: 'base', address: zoo.tokens.honest }, NOW).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: 'upstream_unavailable', status: 502, message: UPSTREAM_DETAIL });
    expect(String((err as Error).cause)).not.toContain('sk-secret');
  });
});

describe('an RPC that does not serve Base', () => {
  it('the first report on a client also asks eth_chainId, in its first round; later reports do not', async () => {
    const fresh = createChainClient({ rpcUrls: [devnet.rpcUrl], rpcTimeoutMs: 5000 });
    let meter: RpcMeter | undefined;
    const onMeter = (m: RpcMeter) => (meter = m);
    // The proxy is the costliest zoo token (7 requests): with the check, 8 of the budget of 12.
    await tokenRisk(fresh, { chain: 'base', address: zoo.tokens.proxy }, NOW, { onMeter });
    expect(meter).toEqual({ requests: 8, rounds: 2 });
    await tokenRisk(fresh, { chain: 'base', address: zoo.tokens.proxy }, NOW, { onMeter });
    expect(meter).toEqual({ requests: 7, rounds: 2 });
  });

  it('a fork of Base answering another chain id: 502, not the verdict its state would give', async () => {
    const fork = await startWrongChainFork(devnet.rpcUrl);
    try {
      const elsewhere = createChainClient({ rpcUrls: [fork.rpcUrl], rpcTimeoutMs: 5000 });
      expectWrongChain(await tokenRisk(elsewhere, { chain: 'base', address: zoo.tokens.honest }, NOW).catch((e: unknown) => e));
      // A wrong chain is never kept as an answer: asked again, refused again.
      expectWrongChain(await tokenRisk(elsewhere, { chain: 'base', address: zoo.tokens.honest }, NOW).catch((e: unknown) => e));
    } finally {
      await fork.stop();
    }
  });
});
