import { decodeEventLog, parseAbi, type Hex } from 'viem';
import type { ChainClient } from '../../platform/chain.js';
import { USDC_ADDRESS } from '../../platform/prices.js';

const usdcEvents = parseAbi([
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
]);
const authorizationStateAbi = parseAbi(['function authorizationState(address authorizer, bytes32 nonce) view returns (bool)']);



export interface ExpectedSettlement {
  payer: string;
  nonce: string;
  payTo: string;
  amount: bigint;
  fromBlock: bigint;
}

/** Blocks per eth_getLogs request when none is given: public Base providers refuse much wider ranges. */
const DEFAULT_LOG_BLOCK_RANGE = 5_000n;

export type LookupResult =
  | { found: true; transaction: string; confirmations: number }
  /** `unused`: USDC says this authorization's nonce was never used, so nothing was charged (yet). */
  | { found: false; reason: string; unused?: boolean };

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/**
 * Finds the on-chain settlement of one EIP-3009 authorization: a successful transaction in
 * which USDC emitted AuthorizationUsed for (payer, nonce) and a Transfer of exactly the price
 * from the payer to our address. Both must be in the same transaction: a payer could sign a
 * second authorization with the same nonce to someone else, and that must not count as paid.
 *
 * `at.txHash` (named by the caller) is the only transaction looked at when given. Otherwise the
 * transaction the facilitator named earlier (`at.knownTx`) is checked first; then USDC's
 * authorizationState says whether the nonce was used at all, and only when it was are the
 * AuthorizationUsed logs searched, from the block the order was stored at, in chunks of
 * `at.logBlockRange` blocks (a single request over hours of blocks is refused by most providers).
 */
export async function findSettlement(
  chain: ChainClient,
  want: ExpectedSettlement,
  at: { txHash?: string | undefined; knownTx?: string | null | undefined; logBlockRange?: number } = {},
): Promise<LookupResult> {
  if (at.txHash) return settlementAt(chain, want, at.txHash as Hex);
  let last: LookupResult | undefined;
  if (at.knownTx) {
    last = await settlementAt(chain, want, at.knownTx as Hex);
    if (last.found) return last;
  }
  const used = await chain.readContract({
    address: USDC_ADDRESS,
    abi: authorizationStateAbi,
    functionName: 'authorizationState',
    args: [want.payer as Hex, want.nonce as Hex],
  });
  if (!used) return { found: false, reason: 'this payment authorization has not been used on chain', unused: true };
  const range = at.logBlockRange && at.logBlockRange > 0 ? BigInt(at.logBlockRange) : DEFAULT_LOG_BLOCK_RANGE;
  const head = await chain.getBlockNumber({ cacheTime: 0 });
  for (let from = want.fromBlock; from <= head; from += range) {
    const to = from + range - 1n < head ? from + range - 1n : head;
    const logs = await chain.getLogs({
      address: USDC_ADDRESS,
      event: usdcEvents[0],
      args: { authorizer: want.payer as Hex, nonce: want.nonce as Hex },
      fromBlock: from,
      toBlock: to,
    });
    const hash = logs[0]?.transactionHash;
    if (hash) return settlementAt(chain, want, hash);
  }
  return last ?? { found: false, reason: 'the authorization was used, but no settlement of it was found since the order was stored' };
}

async function settlementAt(chain: ChainClient, want: ExpectedSettlement, hash: Hex): Promise<LookupResult> {
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
