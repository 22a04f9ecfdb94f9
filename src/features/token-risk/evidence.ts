import type { Address, Hex } from 'viem';

/**
 * Everything the token-risk report learned about one token, as plain facts. The collector
 * (collect.ts) fills it from the chain and the optional market lookup; the scorer (score.ts)
 * turns it into findings, coverage and a verdict without any I/O. Amounts are raw token units.
 */
export interface TokenRiskEvidence {
  address: Address;
  /** The block the reads were made at (Multicall3's answer); null when no code was found. */
  blockNumber: bigint | null;
  contract: ContractEvidence;
  upgradeability: UpgradeEvidence;
  ownership: OwnershipEvidence;
  privileges: PrivilegeEvidence;
  simulation: SimulationEvidence;
  liquidity: LiquidityEvidence;
  holders: HolderEvidence;
}

export interface ContractEvidence {
  /** none: no code (an EOA or a destroyed contract); eip7702: an EOA with a delegation designator. */
  kind: 'none' | 'contract' | 'eip7702';
  codeSize: number;
  /** EIP-1167 minimal proxy (clone): its fixed implementation. */
  cloneOf: Address | null;
  /** EIP-7702: the delegate whose code the account runs. */
  delegate: Address | null;
  /** ERC-20 reads; null where the call reverted or answered garbage. */
  totalSupply: bigint | null;
  decimals: number | null;
  name: string | null;
  symbol: string | null;
  /** paused() when the token has it. */
  paused: boolean | null;
}

export type LogicSource = 'token' | 'eip1967' | 'eip1967-beacon' | 'zeppelinos' | 'eip1167' | 'eip7702';

export interface UpgradeEvidence {
  eip1967: { implementation: Address | null; admin: Address | null; beacon: Address | null };
  /** The implementation the EIP-1967 beacon names (beacon.implementation()). */
  beaconImplementation: Address | null;
  zeppelinos: { implementation: Address | null; admin: Address | null };
  /**
   * The code delegates its calls somewhere (DELEGATECALL) but has no ERC-20 functions itself and
   * no known proxy slot or clone pattern names the target: the real logic is unknown.
   */
  unknownDelegation: boolean;
  /** Whose bytecode holds the token's logic (and was scanned for privileged functions). */
  logic: { address: Address; source: LogicSource; codeSize: number } | null;
  /** upgradeTo / upgradeToAndCall selectors found in the logic (UUPS). */
  upgradeSelectors: Hex[];
}

export interface OwnershipEvidence {
  /** The address owner() (or else getOwner()) returned; null when neither answered. */
  owner: Address | null;
  ownerFunction: 'owner()' | 'getOwner()' | null;
  /** A function answered with something that is not an address. */
  malformed: boolean;
  /** Whether the owner has code (a multisig, timelock or other contract); null when not asked. */
  ownerIsContract: boolean | null;
  accessControl: {
    /** The logic has AccessControl's grantRole/hasRole. */
    present: boolean;
    /** getRoleMemberCount(DEFAULT_ADMIN_ROLE) answered. */
    enumerable: boolean;
    adminCount: number | null;
    /** The first DEFAULT_ADMIN_ROLE holders (up to 3). */
    admins: Address[];
  };
}

export type PrivilegeKind = 'mint' | 'pause' | 'blacklist' | 'fee' | 'limit' | 'trading' | 'upgrade';

export interface PrivilegedSelector {
  selector: Hex;
  signature: string;
  kind: PrivilegeKind;
}

export interface PrivilegeEvidence {
  /** The logic bytecode was available and scanned. */
  scanned: boolean;
  selectors: PrivilegedSelector[];
}

export type SimStep =
  | { status: 'ok' }
  | { status: 'reverted'; reason: string | null }
  /** Not attempted because an earlier step failed. */
  | { status: 'skipped' };

export interface TradeMeasurement {
  step: SimStep;
  amountIn: bigint;
  /** What the pool's constant-product formula (0.3% LP fee, no token tax) says should come out. */
  expectedOut: bigint;
  /** What the fresh account actually received. */
  received: bigint;
}

export interface TransferMeasurement {
  step: SimStep;
  amount: bigint;
  received: bigint;
}

export interface PoolEvidence {
  dex: 'uniswap-v2';
  pair: Address;
  quote: { address: Address; symbol: 'WETH' | 'USDC'; decimals: number };
  /** Reserves at the read block. */
  reserveToken: bigint;
  reserveQuote: bigint;
}

/** A pool with reserves that is too shallow for the simulation to measure anything (see pools.ts). */
export interface ShallowPool {
  pair: Address;
  quote: 'WETH' | 'USDC';
  reserveToken: bigint;
  reserveQuote: bigint;
  /** The quote reserve in USDC micro-units (WETH at the price the depth rule used). */
  quoteValueUsdc: bigint;
}

export type SimulationEvidence =
  | { status: 'not_applicable' }
  | { status: 'no_pool'; checkedQuotes: Array<'WETH' | 'USDC'> }
  /** Pools exist, but every one is too shallow to measure: missing evidence, not a finding. */
  | { status: 'pool_too_shallow'; pools: ShallowPool[] }
  | {
      status: 'simulated';
      pool: PoolEvidence;
      buyer: Address;
      recipient: Address;
      buy: TradeMeasurement;
      transfer: TransferMeasurement;
      sell: TradeMeasurement;
    };

export interface MarketPairEvidence {
  dex: string;
  pairAddress: string;
  quoteSymbol: string;
  liquidityUsd: string | null;
}

export type LiquidityEvidence =
  | { status: 'not_configured' }
  | { status: 'failed' }
  /** The lookup only had an answer older than allowed: paid reports never use it. */
  | { status: 'stale' }
  /** An empty pair list, which providers also return transiently for listed tokens. */
  | { status: 'empty' }
  /** An authoritative "no market for this token". */
  | { status: 'none' }
  | { status: 'ok'; provider: string; fetchedAt: string; liquidityUsd: string | null; pairs: MarketPairEvidence[] };

export interface HolderEvidence {
  totalSupply: bigint | null;
  /** balanceOf(owner) when there is a live owner. */
  owner: bigint | null;
  /** balanceOf(pair) of the simulated pool (the deepest measurable one). */
  pool: bigint | null;
  /** balanceOf(0x0) + balanceOf(0x…dEaD). */
  burned: bigint | null;
}
