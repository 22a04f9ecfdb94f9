import { Type, type Static } from 'typebox';
import { NETWORK, PAID_REPORTS } from '../../platform/prices.js';
import { Address, DateTime, StringEnum } from '../../platform/schemas.js';
import type { PoolChoice } from '../token-risk/pools.js';
import type { ContractFacts } from './chain-reader.js';
import type { MarketView } from './market-view.js';
import { SourceSchema, sourceOf } from './preview.js';

/**
 * The free coverage check: which evidence the paid token-risk report could gather for a token
 * right now, decided from cheap reads only (the market view, eth_getCode, two storage slots, and
 * the report's own Uniswap v2 pool discovery in one Multicall3 call). `coverageOf` is a pure
 * function of those reads. transferSimulation follows the paid report exactly: the report
 * simulates only through a Uniswap v2 pool against WETH or USDC deep enough to measure
 * (token-risk/pools.ts), so a market elsewhere (Aerodrome, Uniswap v3, other quotes) never
 * makes it available.
 */

export const CATEGORIES = [
  'identity',
  'market',
  'liquidity',
  'contractCode',
  'ownership',
  'upgradeability',
  'privilegedFunctions',
  'transferSimulation',
  'holderConcentration',
] as const;
export type Category = (typeof CATEGORIES)[number];
export const STATUSES = ['available', 'partial', 'unavailable'] as const;
export type CoverageStatus = (typeof STATUSES)[number];

/** Over RPC alone this is never more than partial, and it does not decide the report's verdict. */
const INFORMATIONAL: readonly Category[] = ['holderConcentration'];

export const COVERAGE_CACHE_SECONDS = 60;

const Item = Type.Object({ status: StringEnum(STATUSES), reason: Type.String() });

export const CoverageResponse = Type.Object(
  {
    token: Type.Object({ address: Address('The token, EIP-55 checksummed') }),
    coverage: Type.Object(Object.fromEntries(CATEGORIES.map((c) => [c, Item])) as Record<Category, typeof Item>),
    complete: Type.Boolean({
      description:
        'true when every category but holderConcentration (over RPC alone at most partial, and informational) is available: both the evidence the paid verdict rests on (contractCode, ownership, upgradeability, privilegedFunctions, transferSimulation) and the market data shown beside it (identity, market, liquidity). false means some of it is missing right now. A missing verdict category may make the paid report INCOMPLETE, which is charged all the same; missing market data alone does not (liquidity decides no verdict; without it an ALLOW or WARN has confidence medium).',
    }),
    checkedAt: DateTime(`When this coverage was computed; it is reused for up to ${COVERAGE_CACHE_SECONDS} s`),
    source: SourceSchema,
    fee: Type.Object({
      report: Type.Literal(PAID_REPORTS.tokenRisk.path),
      price: Type.Literal(PAID_REPORTS.tokenRisk.price),
      asset: Type.Literal('USDC'),
      network: Type.Literal(NETWORK),
      chargedEvenWhenIncomplete: Type.Literal(true),
      note: Type.String(),
    }),
  },
  { description: 'Per-category coverage of the paid token-risk report; paid results may differ' },
);
export type CoverageResponse = Static<typeof CoverageResponse>;

export const FEE: CoverageResponse['fee'] = {
  report: PAID_REPORTS.tokenRisk.path,
  price: PAID_REPORTS.tokenRisk.price,
  asset: 'USDC',
  network: NETWORK,
  chargedEvenWhenIncomplete: true,
  note: `The token-risk report costs ${PAID_REPORTS.tokenRisk.price} USDC per delivered report and is charged even when it is INCOMPLETE. This check is free, cached for up to ${COVERAGE_CACHE_SECONDS} s, and the paid result may differ.`,
};

type Item = { status: CoverageStatus; reason: string };
const ok = (reason: string): Item => ({ status: 'available', reason });
const partial = (reason: string): Item => ({ status: 'partial', reason });
const none = (reason: string): Item => ({ status: 'unavailable', reason });

function marketItems(view: MarketView): Pick<Record<Category, Item>, 'identity' | 'market' | 'liquidity'> {
  const missing = (['name', 'symbol', 'decimals'] as const).filter((f) => view.token[f] === null);
  const identity =
    missing.length === 0
      ? ok(view.limited ? `name, symbol and decimals known (from the last good answer, ${view.ageSeconds} s old)` : 'name, symbol and decimals known')
      : missing.length === 3
        ? none('neither the market-data provider nor Base gave the name, symbol or decimals')
        : partial(`${missing.join(' and ')} could not be read`);
  if (view.limited) {
    const why = `market-data providers are failing and the last good answer is ${view.ageSeconds} s old; paid reports never use stale data`;
    return { identity, market: none(why), liquidity: none(why) };
  }
  if (view.stale) {
    const why = `market-data providers are failing; the last good answer is ${view.ageSeconds} s old and paid reports never use stale data`;
    return { identity, market: partial(why), liquidity: none(why) };
  }
  const s = view.snapshot!;
  return {
    identity,
    market: ok(`price and pairs from ${view.provider}`),
    liquidity:
      s.liquidityUsd === null
        ? none(`${view.provider} reports no liquidity figure for the token's pairs`)
        : ok(`${s.liquidityUsd} USD across ${s.pairs.length} pair(s) where the token is the base token`),
  };
}

function simulationItem(pool: PoolChoice | null): Item {
  if (pool === null) return none('Base could not be read just now');
  switch (pool.kind) {
    case 'pool':
      return ok(`the Uniswap v2 pool ${pool.pool.pair} against ${pool.pool.quote.symbol} is deep enough: buy, transfer and sell can be simulated`);
    case 'shallow':
      return partial(`the Uniswap v2 pools against WETH or USDC are too shallow to measure a trade (${pool.pools.map((p) => p.pair).join(', ')}): the paid report would be INCOMPLETE`);
    case 'none':
      return none('no Uniswap v2 pool with reserves against WETH or USDC: the paid report cannot simulate buys and sells (it does not trade on other DEXes or against other quotes)');
  }
}

function contractItems(facts: ContractFacts | null, pool: PoolChoice | null): Omit<Record<Category, Item>, 'identity' | 'market' | 'liquidity'> {
  if (facts === null) {
    const why = 'Base could not be read just now';
    return { contractCode: none(why), ownership: none(why), upgradeability: none(why), privilegedFunctions: none(why), transferSimulation: none(why), holderConcentration: none(why) };
  }
  if (facts.codeSize === 0) {
    const why = 'no contract code at this address on Base';
    return { contractCode: none(why), ownership: none(why), upgradeability: none(why), privilegedFunctions: none(why), transferSimulation: none(why), holderConcentration: none(why) };
  }
  const implementation = facts.eip1967Implementation ?? facts.zosImplementation ?? facts.cloneTarget;
  const kind = facts.delegatedTo
    ? `an EIP-7702 delegated account (code of ${facts.delegatedTo})`
    : facts.cloneTarget
      ? `an EIP-1167 clone of ${facts.cloneTarget}`
      : `${facts.codeSize} bytes of contract code`;
  return {
    contractCode: ok(kind),
    ownership: ok('owner(), getOwner() and AccessControl roles can be read on Base'),
    upgradeability: ok(
      facts.eip1967Implementation
        ? `EIP-1967 proxy; implementation ${facts.eip1967Implementation}`
        : facts.zosImplementation
          ? `ZeppelinOS proxy; implementation ${facts.zosImplementation}`
          : 'proxy slots readable; no EIP-1967 or ZeppelinOS implementation set',
    ),
    privilegedFunctions:
      implementation
        ? ok(`implementation bytecode at ${implementation} can be scanned for privileged selectors`)
        : facts.delegatecall
          ? partial('the contract delegates calls to code not named in a standard proxy slot; only its own bytecode can be scanned')
          : ok('bytecode can be scanned for privileged selectors'),
    transferSimulation: simulationItem(pool),
    holderConcentration: partial('no holder index over RPC: only the balances of the trading pairs, the owner and burn addresses against totalSupply'),
  };
}

export function coverageOf(view: MarketView, facts: ContractFacts | null, pool: PoolChoice | null, checkedAt: Date): CoverageResponse {
  const coverage = { ...marketItems(view), ...contractItems(facts, pool) };
  const ordered = Object.fromEntries(CATEGORIES.map((c) => [c, coverage[c]])) as Record<Category, Item>;
  const complete = CATEGORIES.every((c) => INFORMATIONAL.includes(c) || ordered[c].status === 'available');
  return {
    token: { address: view.token.address },
    coverage: ordered,
    complete,
    checkedAt: checkedAt.toISOString(),
    source: sourceOf(view),
    fee: FEE,
  };
}
