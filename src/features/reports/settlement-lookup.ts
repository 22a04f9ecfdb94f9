import { decodeEventLog, parseAbi, type Hex } from 'viem';
import type { ChainClient } from '../../platform/chain.js';
import { USDC_ADDRESS } from '../../platform/prices.js';

const usdcEvents = parseAbi([
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
]);

export interface ExpectedSettlement {
  payer: string;
  nonce: string;
  payTo: string;
  amount: bigint;
  fromBlock: bigint;
}

export type LookupResult =
  | { found: true; transaction: string; confirmations: number }
  | { found: false; reason: string };

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/**
 * Finds the on-chain settlement of one EIP-3009 authorization: a successful transaction in
 * which USDC emitted AuthorizationUsed for (payer, nonce) and a Transfer of exactly the price
 * from the payer to our address. Both must be in the same transaction: a payer could sign a
 * second authorization with the same nonce to someone else, and that must not count as paid.
 */
export async function findSettlement(chain: ChainClient, want: ExpectedSettlement, txHash?: string): Promise<LookupResult> {
  let hash = txHash as Hex | undefined;
  if (!hash) {
    const logs = await chain.getLogs({
      address: USDC_ADDRESS,
      event: usdcEvents[0],
      args: { authorizer: want.payer as Hex, nonce: want.nonce as Hex },
      fromBlock: want.fromBlock,
      toBlock: 'latest',
    });
    hash = logs[0]?.transactionHash ?? undefined;
    if (!hash) return { found: false, reason: 'no settlement of this authorization on chain yet' };
  }
  const receipt = await chain.getTransactionReceipt({ hash }).catch(() => undefined);
  if (!receipt) return { found: false, reason: 'transaction not found or not mined' };
  if (receipt.status !== 'success') return { found: false, reason: 'transaction reverted' };
  let used = false;
  let paid = false;
  for (const log of receipt.logs) {
    if (!same(log.address, USDC_ADDRESS)) continue;
    try {
      const ev = decodeEventLog({ abi: usdcEvents, data: log.data, topics: log.topics });
      if (ev.eventName === 'AuthorizationUsed' && same(ev.args.authorizer, want.payer) && same(ev.args.nonce, want.nonce)) used = true;
      if (ev.eventName === 'Transfer' && same(ev.args.from, want.payer) && same(ev.args.to, want.payTo) && ev.args.value === want.amount) paid = true;
    } catch {
      // Another USDC event (Approval, Mint, …): not part of a settlement.
    }
  }
  if (!used || !paid) return { found: false, reason: 'the transaction does not settle this payment authorization' };
  const head = await chain.getBlockNumber({ cacheTime: 0 });
  return { found: true, transaction: hash, confirmations: Number(head - receipt.blockNumber + 1n) };
}
