import { getAddress, type Address } from 'viem';
import { USDC_ADDRESS } from '../../platform/prices.js';

/**
 * Fixed knowledge about Base addresses. Only addresses that are the same on every Base node
 * (canonical deployments, predeploys, conventions) belong here: anything else must come from
 * the chain, because a preflight that trusts a stale label is worse than one without.
 */

export const ZERO_ADDRESS: Address = '0x0000000000000000000000000000000000000000';
export const DEAD_ADDRESS: Address = '0x000000000000000000000000000000000000dEaD';
/** The pseudo-token eth_simulateV1 (traceTransfers) uses for native value; also our label for ETH. */
export const NATIVE_TOKEN: Address = '0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE';
export const PERMIT2_ADDRESS: Address = '0x000000000022D473030F116dDEE9F6B43aC78BA3';
export const MULTICALL3_ADDRESS: Address = '0xcA11bde05977b3631167028862bE2a173976CA11';
export const WETH_ADDRESS: Address = '0x4200000000000000000000000000000000000006';
export const UNISWAP_V2_ROUTER_ADDRESS: Address = '0x4752ba5DBc23f44D87826276BF6Fd6b1C372aD24';
export const USDC: Address = getAddress(USDC_ADDRESS);

const KNOWN_AS: Record<string, string> = {
  [USDC.toLowerCase()]: 'USDC',
  [WETH_ADDRESS.toLowerCase()]: 'WETH',
  [PERMIT2_ADDRESS.toLowerCase()]: 'Permit2',
  [MULTICALL3_ADDRESS.toLowerCase()]: 'Multicall3',
  [UNISWAP_V2_ROUTER_ADDRESS.toLowerCase()]: 'Uniswap V2 Router',
  '0x8909dc15e40173ff4699343b6eb8132c65e18ec6': 'Uniswap V2 Factory',
  '0x2626664c2603336e57b271c5c0b26f421741e481': 'Uniswap V3 SwapRouter02',
  '0x0000000071727de22e5e9d8baf0edac6f37da032': 'ERC-4337 EntryPoint v0.7',
  '0x4200000000000000000000000000000000000010': 'Base L2 Standard Bridge',
  [ZERO_ADDRESS]: 'zero address',
  [DEAD_ADDRESS.toLowerCase()]: 'burn address',
};

export function knownAs(address: string): string | null {
  return KNOWN_AS[address.toLowerCase()] ?? null;
}

export interface TokenMeta {
  name: string | null;
  symbol: string | null;
  decimals: number | null;
  totalSupply: bigint | null;
  /** 'erc721' when supportsInterface(0x80ac58cd) says so; 'erc20' when decimals and symbol read. */
  standard: 'erc20' | 'erc721' | null;
}

/** Tokens whose metadata never needs a chain read (saves a round trip on the common paths). */
export const STATIC_TOKENS: Record<string, TokenMeta> = {
  [USDC.toLowerCase()]: { name: 'USD Coin', symbol: 'USDC', decimals: 6, totalSupply: null, standard: 'erc20' },
  [WETH_ADDRESS.toLowerCase()]: { name: 'Wrapped Ether', symbol: 'WETH', decimals: 18, totalSupply: null, standard: 'erc20' },
  [NATIVE_TOKEN.toLowerCase()]: { name: 'Ether', symbol: 'ETH', decimals: 18, totalSupply: null, standard: null },
};

/**
 * For the tokens whose metadata is static (their supply is not read on every preflight): an
 * allowance above this is more than the token has ever had in circulation, in effect unlimited
 * (100 billion USDC; 10 million WETH).
 */
export const SUPPLY_CEILING: Record<string, bigint> = {
  [USDC.toLowerCase()]: 100_000_000_000n * 10n ** 6n,
  [WETH_ADDRESS.toLowerCase()]: 10_000_000n * 10n ** 18n,
};

/**
 * Burn sinks: value sent there is gone for good. The zero and dead addresses, and the
 * precompiles: they take ETH with a call and have no code that could ever send it (or a token)
 * on, and no key.
 */
export function isBurnAddress(address: string): boolean {
  const a = address.toLowerCase();
  return a === ZERO_ADDRESS || a === DEAD_ADDRESS.toLowerCase() || isPrecompile(a);
}

/**
 * Precompiles on Base: 0x01..0x11 (through Prague's BLS12-381 set) and 0x100 (P256VERIFY,
 * RIP-7212). They have no code, so without this list they would read as EOAs.
 */
export function isPrecompile(address: string): boolean {
  const a = address.toLowerCase();
  if (!a.startsWith('0x' + '0'.repeat(36))) return false;
  const n = Number.parseInt(a.slice(38), 16);
  return (n >= 1 && n <= 0x11) || n === 0x100;
}

/** Unlimited in practice: no token supply comes near 2^128 base units; wallets send 2^256-1 or 2^160-1 (Permit2). */
export const UNLIMITED_THRESHOLD = 2n ** 128n;

export const same = (a: string | null | undefined, b: string | null | undefined): boolean =>
  !!a && !!b && a.toLowerCase() === b.toLowerCase();
