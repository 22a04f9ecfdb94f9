import { randomBytes } from 'node:crypto';
import { erc20Abi, getAddress, keccak256, parseAbi, stringToHex, toHex, zeroAddress, type Address, type Hex } from 'viem';
import { onBase, type ChainClient } from '../../platform/chain.js';
import { tokenDecimals } from '../../platform/token-metadata.js';
import { codeSize, delegatesToUnknownCode, eip1167Target, eip7702Delegate, hasSelector, privilegedSelectors, scanCode, SELECTOR } from './bytecode.js';
import { BASE_UNISWAP_V2, type DexConfig } from './dex.js';
import type { LogicSource, PoolEvidence, SimulationEvidence, TokenRiskEvidence } from './evidence.js';
import { lookupLiquidity, type TokenMarketLookup } from './market.js';
import { aggregateNamed, asAddress, asBool, asString, asUint, blockNumberRead, newMeter, read, readSlots, slotAddress, timestampRead, track, type Read, type ReadResult, type RpcMeter } from './rpc.js';
import { choosePool, farPoolReads, poolCandidates, poolReads, quotesFor, wethPriceUsdc, withFarPools, type PoolChoice } from './pools.js';
import { simulateTrades } from './simulate.js';

/**
 * Collects the token-risk evidence over the configured RPC, in at most three sequential rounds
 * of parallel requests (normally two):
 *   round 1: eth_getCode(token); one eth_call reading the proxy slots; one Multicall3 eth_call
 *            with the ERC-20, ownership, role and pool reads; (the market lookup, in parallel;
 *            on a client's first report also eth_chainId: nothing is used unless it says Base)
 *   round 2: eth_getCode of the implementation and of the owner; one Multicall3 eth_call for
 *            the owner's balance (and a beacon's implementation); one eth_simulateV1
 *   round 3: only for beacon proxies, pools at unexpected addresses, or a buy tax so high that
 *            the simulation must be re-sized.
 * The simulated pool is the deepest measurable one against WETH or USDC (pools.ts), never merely
 * the first found: anyone can add a dust pool.
 * Every read is fresh (no cache, no stale fallback); viem errors propagate (the report turns
 * them into a 502 and nothing is charged).
 */

export interface CollectOptions {
  dex?: DexConfig;
  market?: TokenMarketLookup;
  /** Two fresh accounts for the simulation (default: random each time). */
  freshAccounts?: () => [Address, Address];
}

const DEAD: Address = '0x000000000000000000000000000000000000dEaD';
const DEFAULT_ADMIN_ROLE: Hex = `0x${'00'.repeat(32)}`;
const erc1967Slot = (label: string): Hex => toHex(BigInt(keccak256(stringToHex(label))) - 1n, { size: 32 });
export const PROXY_SLOTS = {
  implementation: erc1967Slot('eip1967.proxy.implementation'),
  admin: erc1967Slot('eip1967.proxy.admin'),
  beacon: erc1967Slot('eip1967.proxy.beacon'),
  zosImplementation: keccak256(stringToHex('org.zeppelinos.proxy.implementation')),
  zosAdmin: keccak256(stringToHex('org.zeppelinos.proxy.admin')),
} as const;

const tokenAbi = parseAbi([
  'function owner() view returns (address)',
  'function getOwner() view returns (address)',
  'function paused() view returns (bool)',
  'function getRoleMemberCount(bytes32) view returns (uint256)',
  'function getRoleMember(bytes32, uint256) view returns (address)',
  'function implementation() view returns (address)',
]);

const randomAccount = (): Address => getAddress(`0x${randomBytes(20).toString('hex')}`);
const isBurn = (a: Address | null) => a === null || a === zeroAddress || a.toLowerCase() === DEAD.toLowerCase();

/**
 * The token's owner from owner() and getOwner(). A live address from either wins over a burn
 * address from the other: a contract that renounces owner() while getOwner() still names an
 * account with the owner's powers is not renounced.
 */
export function ownerOf(owner: Address | null, getOwner: Address | null): { owner: Address | null; ownerFunction: 'owner()' | 'getOwner()' | null } {
  if (owner && !isBurn(owner)) return { owner, ownerFunction: 'owner()' };
  if (getOwner && !isBurn(getOwner)) return { owner: getOwner, ownerFunction: 'getOwner()' };
  if (owner) return { owner, ownerFunction: 'owner()' };
  if (getOwner) return { owner: getOwner, ownerFunction: 'getOwner()' };
  return { owner: null, ownerFunction: null };
}

export async function collectEvidence(chain: ChainClient, token: Address, opts: CollectOptions = {}): Promise<{ evidence: TokenRiskEvidence; meter: RpcMeter }> {
  const dex = opts.dex ?? BASE_UNISWAP_V2;
  const meter = newMeter();
  const quotes = quotesFor(dex, token);

  const r1: Record<string, Read> = {
    owner: read(token, tokenAbi, 'owner'),
    getOwner: read(token, tokenAbi, 'getOwner'),
    totalSupply: read(token, erc20Abi, 'totalSupply'),
    decimals: read(token, erc20Abi, 'decimals'),
    name: read(token, erc20Abi, 'name'),
    symbol: read(token, erc20Abi, 'symbol'),
    paused: read(token, tokenAbi, 'paused'),
    burnZero: read(token, erc20Abi, 'balanceOf', [zeroAddress]),
    burnDead: read(token, erc20Abi, 'balanceOf', [DEAD]),
    adminCount: read(token, tokenAbi, 'getRoleMemberCount', [DEFAULT_ADMIN_ROLE]),
    admin0: read(token, tokenAbi, 'getRoleMember', [DEFAULT_ADMIN_ROLE, 0n]),
    admin1: read(token, tokenAbi, 'getRoleMember', [DEFAULT_ADMIN_ROLE, 1n]),
    admin2: read(token, tokenAbi, 'getRoleMember', [DEFAULT_ADMIN_ROLE, 2n]),
    blockNumber: blockNumberRead(),
    timestamp: timestampRead(),
  };
  Object.assign(r1, poolReads(dex, token));
  const slotList = Object.values(PROXY_SLOTS);
  meter.rounds += 1;
  // Nothing read here is used unless the RPC says it serves Base (asked once per client).
  const [code, slots, r, liquidity] = await Promise.all([
    track(meter, chain.getCode({ address: token })),
    track(meter, readSlots(chain, token, slotList)),
    track(meter, aggregateNamed(chain, r1)),
    lookupLiquidity(opts.market, token),
    onBase(chain, () => void (meter.requests += 1)),
  ]);
  const blockNumber = asUint(r.blockNumber);
  const timestamp = asUint(r.timestamp) ?? 0n;
  const at = blockNumber ?? undefined;
  const slot = (i: number) => slotAddress(slots[i] ?? '0x0');
  const eip1967 = { implementation: slot(0), admin: slot(1), beacon: slot(2) };
  const zeppelinos = { implementation: slot(3), admin: slot(4) };

  const totalSupply = asUint(r.totalSupply);
  const decimalsRaw = asUint(r.decimals);
  const ownerRead = asAddress(r.owner);
  const getOwnerRead = asAddress(r.getOwner);
  const { owner, ownerFunction } = ownerOf(ownerRead.value, getOwnerRead.value);
  const adminCount = asUint(r.adminCount);
  const admins = (['admin0', 'admin1', 'admin2'] as const).map((k) => asAddress(r[k]).value).filter((a): a is Address => a !== null);
  const burned = asUint(r.burnZero) !== null || asUint(r.burnDead) !== null ? (asUint(r.burnZero) ?? 0n) + (asUint(r.burnDead) ?? 0n) : null;

  const hex = code ?? '0x';
  const delegate = eip7702Delegate(hex);
  const cloneOf = delegate ? null : eip1167Target(hex);
  const evidence: TokenRiskEvidence = {
    address: getAddress(token),
    blockNumber,
    contract: {
      kind: codeSize(code) === 0 ? 'none' : delegate ? 'eip7702' : 'contract',
      codeSize: codeSize(code),
      cloneOf,
      delegate,
      totalSupply,
      decimals: tokenDecimals(decimalsRaw),
      name: asString(r.name),
      symbol: asString(r.symbol),
      paused: asBool(r.paused),
    },
    upgradeability: { eip1967, beaconImplementation: null, zeppelinos, unknownDelegation: false, logic: null, upgradeSelectors: [] },
    ownership: {
      owner,
      ownerFunction,
      malformed: owner === null && (ownerRead.malformed || getOwnerRead.malformed),
      ownerIsContract: null,
      accessControl: { present: false, enumerable: adminCount !== null, adminCount: adminCount === null ? null : Number(adminCount), admins },
    },
    privileges: { scanned: false, selectors: [] },
    simulation: { status: 'not_applicable' },
    liquidity,
    holders: { totalSupply, owner: null, pool: null, burned },
  };
  if (evidence.contract.kind === 'none') return { evidence, meter };

  // Where the logic lives, in order of precedence; a beacon needs one more read first.
  let logic: { address: Address; source: LogicSource } = { address: evidence.address, source: 'token' };
  if (delegate) logic = { address: delegate, source: 'eip7702' };
  else if (cloneOf) logic = { address: cloneOf, source: 'eip1167' };
  else if (eip1967.implementation) logic = { address: eip1967.implementation, source: 'eip1967' };
  else if (zeppelinos.implementation) logic = { address: zeppelinos.implementation, source: 'zeppelinos' };
  const beacon = !delegate && !cloneOf && !eip1967.implementation ? eip1967.beacon : null;

  // The pool to trade through: the deepest measurable one. Pairs at unexpected addresses need
  // their reserves read first (round 2), so then the choice, and the simulation, wait a round.
  const candidates = poolCandidates(dex, token, r);
  const wethPrice = wethPriceUsdc(dex, r);
  const farReads = farPoolReads(token, candidates);
  const hasFar = Object.keys(farReads).length > 0;
  let choice: PoolChoice | null = hasFar ? null : choosePool(candidates, wethPrice);
  let pool: PoolEvidence | null = choice?.kind === 'pool' ? choice.pool : null;

  const liveOwner = owner && !isBurn(owner) ? owner : null;
  const extras: Record<string, Read> = {};
  if (liveOwner) extras.ownerBalance = read(token, erc20Abi, 'balanceOf', [liveOwner]);
  if (beacon) extras.beaconImplementation = read(beacon, tokenAbi, 'implementation');
  Object.assign(extras, farReads);
  const [buyer, recipient] = opts.freshAccounts?.() ?? [randomAccount(), randomAccount()];
  const canTrade = totalSupply !== null && blockNumber !== null;
  const simulate = (p: PoolEvidence) => simulateTrades(chain, meter, { token: evidence.address, pool: p, dex, blockNumber: blockNumber!, timestamp, buyer, recipient });

  const needLogicCode = logic.source !== 'token' && !beacon;
  const wantSim = canTrade && pool !== null;
  const hasExtras = Object.keys(extras).length > 0;
  if (needLogicCode || liveOwner || hasExtras || wantSim) meter.rounds += 1;
  const [logicCode, ownerCode, x, sim] = await Promise.all([
    needLogicCode ? track(meter, chain.getCode({ address: logic.address, blockNumber: at })) : Promise.resolve(logic.source === 'token' ? code : undefined),
    liveOwner ? track(meter, chain.getCode({ address: liveOwner, blockNumber: at })) : Promise.resolve(undefined),
    hasExtras ? track(meter, aggregateNamed(chain, extras, at)) : Promise.resolve({} as Record<string, ReadResult>),
    wantSim ? simulate(pool!) : Promise.resolve(null),
  ]);

  let finalLogicCode: Hex | undefined = logicCode;
  if (beacon) {
    const impl = asAddress(x.beaconImplementation).value;
    evidence.upgradeability.beaconImplementation = impl;
    if (impl) {
      logic = { address: impl, source: 'eip1967-beacon' };
      meter.rounds += 1;
      finalLogicCode = await track(meter, chain.getCode({ address: impl, blockNumber: at }));
    } else {
      finalLogicCode = undefined;
      logic = { address: beacon, source: 'eip1967-beacon' };
    }
  }
  let simulation: SimulationEvidence | null = sim;
  if (hasFar) {
    choice = choosePool(withFarPools(token, candidates, x), wethPrice);
    if (choice.kind === 'pool' && canTrade) {
      pool = choice.pool;
      meter.rounds += 1;
      simulation = await simulate(pool);
    }
  }
  if (choice?.kind === 'pool') evidence.holders.pool = choice.tokenBalance;
  evidence.simulation =
    simulation ??
    (!canTrade
      ? { status: 'not_applicable' }
      : choice?.kind === 'shallow'
        ? { status: 'pool_too_shallow', pools: choice.pools }
        : { status: 'no_pool', checkedQuotes: quotes.map((q) => q.symbol) });

  const scan = finalLogicCode && codeSize(finalLogicCode) > 0 ? scanCode(finalLogicCode) : null;
  const ownScan = logic.source === 'token' ? scan : scanCode(hex);
  evidence.upgradeability.logic = { address: logic.address, source: logic.source, codeSize: codeSize(finalLogicCode) };
  evidence.upgradeability.unknownDelegation = logic.source === 'token' && ownScan !== null && delegatesToUnknownCode(ownScan);
  if (scan && !evidence.upgradeability.unknownDelegation) {
    const found = privilegedSelectors(scan);
    evidence.privileges = { scanned: true, selectors: found.filter((s) => s.kind !== 'upgrade') };
    evidence.upgradeability.upgradeSelectors = found.filter((s) => s.kind === 'upgrade').map((s) => s.selector);
    evidence.ownership.accessControl.present = hasSelector(scan, SELECTOR.grantRole) || hasSelector(scan, SELECTOR.hasRole);
  }
  if (liveOwner) {
    evidence.ownership.ownerIsContract = codeSize(ownerCode) > 0;
    evidence.holders.owner = asUint(x.ownerBalance);
  }
  return { evidence, meter };
}
