import { encodePacked, getAddress, getContractAddress, keccak256, parseAbi, type Address } from 'viem';
import { USDC_ADDRESS } from '../../platform/prices.js';

/**
 * Where the transfer simulation trades: Uniswap v2 on Base, against WETH or USDC. These are the
 * canonical Base addresses; the devnet's token zoo deploys the npm artifacts at the very same
 * addresses, so the report needs no devnet-specific configuration.
 */
export interface DexConfig {
  factory: Address;
  router: Address;
  weth: Address;
  usdc: Address;
  /** keccak256 of the pair creation code; pair addresses are CREATE2(factory, token0.token1). */
  pairInitCodeHash: `0x${string}`;
  /**
   * Storage slot of USDC's balance mapping (FiatTokenV2_2 `balanceAndBlacklistStates`), so a
   * state override can fund a fresh buyer with USDC. Its top bit is the blacklist flag.
   */
  usdcBalanceSlot: bigint;
}

export const BASE_UNISWAP_V2: DexConfig = {
  factory: getAddress('0x8909Dc15e40173Ff4699343b6eB8132c65e18eC6'),
  router: getAddress('0x4752ba5DBc23f44D87826276BF6Fd6b1C372aD24'),
  weth: getAddress('0x4200000000000000000000000000000000000006'),
  usdc: getAddress(USDC_ADDRESS),
  pairInitCodeHash: '0x96e8ac4277198ff8b6f785478aa9a39f403cb768dd02cbee326c3e7da348845f',
  usdcBalanceSlot: 9n,
};

export const pairAbi = parseAbi([
  'function getReserves() view returns (uint112 reserve0, uint112 reserve1, uint32 blockTimestampLast)',
  'function token0() view returns (address)',
]);

export const factoryAbi = parseAbi(['function getPair(address, address) view returns (address)']);

export const routerAbi = parseAbi([
  'function swapExactETHForTokensSupportingFeeOnTransferTokens(uint256 amountOutMin, address[] path, address to, uint256 deadline) payable',
  'function swapExactTokensForTokensSupportingFeeOnTransferTokens(uint256 amountIn, uint256 amountOutMin, address[] path, address to, uint256 deadline)',
]);

/** Uniswap v2 sorts the pair's tokens by address. */
export function sortTokens(a: Address, b: Address): [Address, Address] {
  return a.toLowerCase() < b.toLowerCase() ? [getAddress(a), getAddress(b)] : [getAddress(b), getAddress(a)];
}

/** The pair address the factory would create (or created) for two tokens. */
export function pairAddress(dex: Pick<DexConfig, 'factory' | 'pairInitCodeHash'>, a: Address, b: Address): Address {
  const [t0, t1] = sortTokens(a, b);
  return getContractAddress({
    opcode: 'CREATE2',
    from: dex.factory,
    salt: keccak256(encodePacked(['address', 'address'], [t0, t1])),
    bytecodeHash: dex.pairInitCodeHash,
  });
}

/** UniswapV2Library.getAmountOut: the fair output of a swap with the pool's 0.3% fee and no token tax. */
export function getAmountOut(amountIn: bigint, reserveIn: bigint, reserveOut: bigint): bigint {
  if (amountIn <= 0n || reserveIn <= 0n || reserveOut <= 0n) return 0n;
  const withFee = amountIn * 997n;
  return (withFee * reserveOut) / (reserveIn * 1000n + withFee);
}
