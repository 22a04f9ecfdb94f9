import { expect } from 'vitest';
import { startChain, type ChainHandle } from '../../src/devnet/index.js';
import { UPSTREAM_DETAIL } from '../../src/platform/chain.js';
import { AppError } from '../../src/platform/errors.js';

/** Base Sepolia's chain id: what a testnet URL configured by mistake answers. */
export const NOT_BASE_CHAIN_ID = 84532;

/**
 * A real anvil forking `rpcUrl` (the devnet: the same USDC, tokens and pools, the same balances)
 * that answers eth_chainId 84532: an RPC URL of a fork or a testnet set by mistake. Everything it
 * says about state is what the devnet would say, so only the chain check can tell it from Base.
 */
export function startWrongChainFork(rpcUrl: string): Promise<ChainHandle> {
  return startChain({ chainId: NOT_BASE_CHAIN_ID, extraArgs: ['--fork-url', rpcUrl] });
}

/** `err` is the 502 of an RPC that does not serve Base, its logged cause naming the chain it serves. */
export function expectWrongChain(err: unknown, chainId = NOT_BASE_CHAIN_ID): void {
  expect(err).toBeInstanceOf(AppError);
  expect(err).toMatchObject({ code: 'upstream_unavailable', status: 502, message: UPSTREAM_DETAIL });
  // Found by the client's check (onBase) or by the check of the URL itself (its reads fail, a
  // contract read's failure wrapped by viem as a CallExecutionError): whichever fails first.
  expect(((err as AppError).cause as Error).message).toMatch(new RegExp(`^((WrongChain|CallExecution)Error: )?the RPC serves chain id ${chainId}, not Base \\(8453\\)$`));
}
