import { decodeErrorResult, encodeAbiParameters, encodeFunctionData, erc20Abi, keccak256, maxUint256, parseEther, size, type Address, type Hex } from 'viem';
import { SIMULATED_GAS_PRICE, type ChainClient } from '../../platform/chain.js';
import { getAmountOut, pairAbi, routerAbi, sortTokens, type DexConfig } from './dex.js';
import { probeSizes } from './pools.js';
import type { PoolEvidence, SimStep, SimulationEvidence, TradeMeasurement, TransferMeasurement } from './evidence.js';
import { track, type RpcMeter } from './rpc.js';

/**
 * Buys, transfers and sells the token from fresh accounts with eth_simulateV1 (one request, two
 * simulated blocks, nothing sent): block 1 buys through the Uniswap v2 router with a state
 * override funding the buyer (ETH, or USDC written into USDC's balance slot); block 2, three
 * minutes later (so per-block anti-bot rules do not fake a honeypot), sends part of the tokens to
 * a second fresh account and sells another part back to the pool. Taxes are measured against the
 * pool's own constant-product quote at the reserves read inside the simulation, so the 0.3% LP
 * fee is never counted as a tax.
 *
 * Sizes (pools.ts probeSizes): the buy spends 0.5% of the pool's quote reserve; the transfer moves
 * 10% and the sell 50% of the expected output. The collector only passes pools where each of
 * these is large enough to measure. When a buy tax leaves less than that, a second simulation is made
 * with sizes taken from what was really received (the only case with a second request).
 */

export interface SimulationInput {
  token: Address;
  pool: PoolEvidence;
  dex: DexConfig;
  blockNumber: bigint;
  timestamp: bigint;
  buyer: Address;
  recipient: Address;
}

interface Sizes {
  buyIn: bigint;
  transfer: bigint;
  sell: bigint;
}

/** Every call pays SIMULATED_GAS_PRICE, in blocks with that base fee; the fresh buyer's extra ETH pays it. */
const call = (from: Address, to: Address, data: Hex, value?: bigint) => ({ account: from, to, data, gasPrice: SIMULATED_GAS_PRICE, ...(value ? { value } : {}) });
const balanceOf = (who: Address) => encodeFunctionData({ abi: erc20Abi, functionName: 'balanceOf', args: [who] });

/** Revert data as a short reason: Error(string), Panic(code), or the custom error's selector. */
export function revertReason(data: Hex | undefined): string | null {
  if (!data || size(data) < 4) return null;
  try {
    const err = decodeErrorResult({ data, abi: [] });
    if (err.errorName === 'Error') return String(err.args?.[0] ?? '');
    if (err.errorName === 'Panic') return `Panic(${String(err.args?.[0])})`;
  } catch {
    // not a standard error
  }
  return `custom error ${data.slice(0, 10)}`;
}

type SimCall = { status: 'success' | 'failure'; data: Hex };

const step = (c: SimCall | undefined): SimStep => {
  if (!c) return { status: 'skipped' };
  if (c.status !== 'success') return { status: 'reverted', reason: revertReason(c.data) };
  return { status: 'ok' };
};

/** An ERC-20 transfer/approve that returned `false` failed as surely as one that reverted. */
const boolStep = (c: SimCall | undefined): SimStep => {
  const s = step(c);
  if (s.status === 'ok' && c && size(c.data) >= 32 && BigInt(c.data.slice(0, 66)) === 0n) return { status: 'reverted', reason: 'returned false' };
  return s;
};

const uint = (c: SimCall | undefined): bigint => (c?.status === 'success' && size(c.data) >= 32 ? BigInt(c.data.slice(0, 66)) : 0n);

function reservesOf(c: SimCall | undefined, token: Address, quote: Address): { rToken: bigint; rQuote: bigint } {
  if (c?.status !== 'success' || size(c.data) < 64) return { rToken: 0n, rQuote: 0n };
  const r0 = BigInt(c.data.slice(0, 66));
  const r1 = BigInt(`0x${c.data.slice(66, 130)}`);
  const tokenIsToken0 = sortTokens(token, quote)[0].toLowerCase() === token.toLowerCase();
  return tokenIsToken0 ? { rToken: r0, rQuote: r1 } : { rToken: r1, rQuote: r0 };
}

async function runOnce(chain: ChainClient, input: SimulationInput, sizes: Sizes) {
  const { token, pool, dex, buyer: B, recipient: C } = input;
  const quote = pool.quote.address;
  const deadline = input.timestamp + 86_400n;
  const funding =
    pool.quote.symbol === 'USDC'
      ? { address: dex.usdc, stateDiff: [{ slot: keccak256(encodeAbiParameters([{ type: 'address' }, { type: 'uint256' }], [B, dex.usdcBalanceSlot])), value: `0x${sizes.buyIn.toString(16).padStart(64, '0')}` as Hex }] }
      : null;
  const buy =
    pool.quote.symbol === 'USDC'
      ? [
          call(B, quote, encodeFunctionData({ abi: erc20Abi, functionName: 'approve', args: [dex.router, maxUint256] })),
          call(B, dex.router, encodeFunctionData({ abi: routerAbi, functionName: 'swapExactTokensForTokensSupportingFeeOnTransferTokens', args: [sizes.buyIn, 0n, [quote, token], B, deadline] })),
        ]
      : [call(B, dex.router, encodeFunctionData({ abi: routerAbi, functionName: 'swapExactETHForTokensSupportingFeeOnTransferTokens', args: [0n, [quote, token], B, deadline] }), sizes.buyIn)];
  const getReserves = call(B, pool.pair, encodeFunctionData({ abi: pairAbi, functionName: 'getReserves' }));
  const block1 = [getReserves, ...buy, call(B, token, balanceOf(B))];
  const block2 = [
    call(B, token, balanceOf(C)),
    call(B, token, encodeFunctionData({ abi: erc20Abi, functionName: 'transfer', args: [C, sizes.transfer] })),
    call(B, token, balanceOf(C)),
    call(B, token, encodeFunctionData({ abi: erc20Abi, functionName: 'approve', args: [dex.router, maxUint256] })),
    getReserves,
    call(B, quote, balanceOf(B)),
    call(B, dex.router, encodeFunctionData({ abi: routerAbi, functionName: 'swapExactTokensForTokensSupportingFeeOnTransferTokens', args: [sizes.sell, 0n, [token, quote], B, deadline] })),
    call(B, quote, balanceOf(B)),
  ];
  const blocks = await chain.simulateBlocks({
    blockNumber: input.blockNumber,
    blocks: [
      {
        blockOverrides: { time: input.timestamp + 2n, baseFeePerGas: SIMULATED_GAS_PRICE },
        stateOverrides: [{ address: B, balance: (pool.quote.symbol === 'USDC' ? 0n : sizes.buyIn) + parseEther('1') }, ...(funding ? [funding] : [])],
        calls: block1,
      },
      { blockOverrides: { time: input.timestamp + 182n, baseFeePerGas: SIMULATED_GAS_PRICE }, calls: block2 },
    ],
  });
  const c1 = (blocks[0]?.calls ?? []) as unknown as SimCall[];
  const c2 = (blocks[1]?.calls ?? []) as unknown as SimCall[];
  // Block 1 is [getReserves, (USDC approve,) swap, balanceOf(buyer)].
  const approved = pool.quote.symbol === 'USDC' ? boolStep(c1[1]) : ({ status: 'ok' } as SimStep);
  const buyStep: SimStep = approved.status === 'ok' ? step(c1[buy.length]) : { status: 'reverted', reason: 'the buyer could not approve USDC' };
  return { c1, c2, buyStep, buyCallIndex: buy.length };
}

/**
 * One eth_simulateV1 request (counted in the caller's round), or two when re-sized (the second is
 * a round of its own). Throws viem errors; the report turns them into a 502.
 */
export async function simulateTrades(chain: ChainClient, meter: RpcMeter, input: SimulationInput): Promise<SimulationEvidence> {
  const { pool, token } = input;
  const quote = pool.quote.address;
  const probe = probeSizes({ rToken: pool.reserveToken, rQuote: pool.reserveQuote });
  const buyIn = probe.buyIn;
  let sizes: Sizes = { buyIn, transfer: probe.transfer, sell: probe.sell };

  let run = await track(meter, runOnce(chain, input, sizes));
  const boughtFirst = uint(run.c1[run.buyCallIndex + 1]);
  if (run.buyStep.status === 'ok' && boughtFirst > 0n && boughtFirst < sizes.transfer + sizes.sell) {
    sizes = { buyIn, transfer: boughtFirst / 10n, sell: boughtFirst / 2n };
    meter.rounds += 1;
    run = await track(meter, runOnce(chain, input, sizes));
  }

  const { c1, c2 } = run;
  const before = reservesOf(c1[0], token, quote);
  const bought = uint(c1[run.buyCallIndex + 1]);
  const buyOk = run.buyStep.status === 'ok';
  const canMove = buyOk && bought > 0n;
  const buy: TradeMeasurement = { step: run.buyStep, amountIn: buyIn, expectedOut: getAmountOut(buyIn, before.rQuote, before.rToken), received: buyOk ? bought : 0n };

  const transfer: TransferMeasurement = canMove
    ? { step: boolStep(c2[1]), amount: sizes.transfer, received: uint(c2[2]) - uint(c2[0]) }
    : { step: { status: 'skipped' }, amount: sizes.transfer, received: 0n };

  let sell: TradeMeasurement;
  if (!canMove) {
    sell = { step: { status: 'skipped' }, amountIn: sizes.sell, expectedOut: 0n, received: 0n };
  } else {
    const approve = boolStep(c2[3]);
    const beforeSell = reservesOf(c2[4], token, quote);
    const swap = approve.status === 'ok' ? step(c2[6]) : { status: 'reverted' as const, reason: `approve: ${approve.status === 'reverted' ? approve.reason : 'failed'}` };
    const got = uint(c2[7]) - uint(c2[5]);
    sell = { step: swap, amountIn: sizes.sell, expectedOut: getAmountOut(sizes.sell, beforeSell.rToken, beforeSell.rQuote), received: swap.status === 'ok' && got > 0n ? got : 0n };
  }
  return { status: 'simulated', pool, buyer: input.buyer, recipient: input.recipient, buy, transfer, sell };
}
