import { decodeEventLog, encodeEventTopics, pad, parseAbi, toHex, type Hex } from 'viem';
import { blockRanges, onBase, type ChainClient } from '../../platform/chain.js';
import { USDC_ADDRESS } from '../../platform/prices.js';

const usdcEvents = parseAbi([
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)',
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
  | {
      found: false;
      reason: string;
      /**
       * USDC said, at a block with this timestamp (chain time, seconds), that the authorization's
       * nonce was unused: nothing was charged up to that block.
       */
      unusedAt?: bigint;
      /** The nonce is spent without paying us (cancelled, or used for another transfer): it never will. */
      spentElsewhere?: boolean;
    };

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
 * `at.logBlockRange` blocks (a single request over hours of blocks is refused by most providers),
 * and no further than `at.maxSpanBlocks` past that block, whatever the head.
 *
 * Only Base's word counts: an RPC that does not say it serves Base (a fork or a testnet URL set
 * by mistake, which may well hold the very transaction) is refused before anything is read, as
 * an unreadable chain.
 */
export async function findSettlement(
  chain: ChainClient,
  want: ExpectedSettlement,
  at: { txHash?: string | undefined; knownTx?: string | null | undefined; logBlockRange?: number; maxSpanBlocks?: number } = {},
): Promise<LookupResult> {
  await onBase(chain);
  if (at.txHash) return settlementAt(chain, want, at.txHash as Hex);
  let last: LookupResult | undefined;
  if (at.knownTx) {
    last = await settlementAt(chain, want, at.knownTx as Hex);
    if (last.found) return last;
  }
  // One block for both reads, so that "unused" is known together with that block's time.
  const block = await chain.getBlock({ blockTag: 'latest' });
  const used = await chain.readContract({
    address: USDC_ADDRESS,
    abi: authorizationStateAbi,
    functionName: 'authorizationState',
    args: [want.payer as Hex, want.nonce as Hex],
    blockNumber: block.number,
  });
  if (!used) return { found: false, reason: 'this payment authorization has not been used on chain', unusedAt: block.timestamp };
  const range = at.logBlockRange && at.logBlockRange > 0 ? BigInt(at.logBlockRange) : DEFAULT_LOG_BLOCK_RANGE;
  // The search ends `maxSpanBlocks` after the block the order was stored at, however far the
  // node says its head is: a settlement lands before the authorization's validBefore (minutes
  // after it was signed), and a head of 2^50 (a node's garbage) must not start an endless scan.
  const span = at.maxSpanBlocks === undefined ? undefined : BigInt(at.maxSpanBlocks);
  const end = span !== undefined && block.number - want.fromBlock > span ? want.fromBlock + span : block.number;
  const topics = [
    [encodeEventTopics({ abi: usdcEvents, eventName: 'AuthorizationUsed' })[0]!, encodeEventTopics({ abi: usdcEvents, eventName: 'AuthorizationCanceled' })[0]!],
    pad(want.payer.toLowerCase() as Hex, { size: 32 }),
    want.nonce.toLowerCase() as Hex,
  ];
  for (const [from, to] of blockRanges(want.fromBlock, end, range)) {
    const logs: unknown = await chain.request({
      method: 'eth_getLogs',
      params: [{ address: USDC_ADDRESS, topics, fromBlock: toHex(from), toBlock: toHex(to) }],
    });
    if (!Array.isArray(logs)) throw new Error('eth_getLogs answered no list of logs');
    // The node's filter is not trusted: only a USDC log of this very authorization (payer and
    // nonce) counts. A provider that ignored the topics would otherwise hand over someone else's
    // Transfer, and a settled payment would be judged "used for another transfer".
    for (const log of logs) {
      const event = authorizationEvent(log, want);
      if (!event) continue;
      if (event === 'AuthorizationCanceled') return { found: false, reason: 'the payer cancelled this payment authorization', spentElsewhere: true };
      const settled = await settlementAt(chain, want, (log as { transactionHash: Hex }).transactionHash);
      if (settled.found) return settled;
      if (settled.reason === NOT_OURS) return { found: false, reason: 'the authorization was used for another transfer', spentElsewhere: true };
      return settled;
    }
  }
  return last ?? { found: false, reason: 'the authorization was used, but no settlement of it was found since the order was stored' };
}

/** The event of a log that USDC emitted for this authorization (payer and nonce), or undefined. */
function authorizationEvent(log: unknown, want: ExpectedSettlement): 'AuthorizationUsed' | 'AuthorizationCanceled' | undefined {
  const l = log as { address?: unknown; data?: unknown; topics?: unknown; removed?: unknown; transactionHash?: unknown } | null;
  if (!l || l.removed === true || typeof l.address !== 'string' || typeof l.data !== 'string' || !Array.isArray(l.topics) || typeof l.transactionHash !== 'string') return undefined;
  const event = usdcEvent(l as { address: string; data: Hex; topics: Hex[] });
  if (event?.eventName !== 'AuthorizationUsed' && event?.eventName !== 'AuthorizationCanceled') return undefined;
  return same(event.args.authorizer, want.payer) && same(event.args.nonce, want.nonce) ? event.eventName : undefined;
}

const NOT_OURS = 'the transaction does not settle this payment authorization';

async function settlementAt(chain: ChainClient, want: ExpectedSettlement, hash: Hex): Promise<LookupResult> {
  const receipt = await chain.getTransactionReceipt({ hash }).catch(() => undefined);
  if (!receipt || !same(String(receipt.transactionHash), hash)) return { found: false, reason: 'transaction not found or not mined' };
  if (receipt.status !== 'success') return { found: false, reason: 'transaction reverted' };
  if (!settles(receipt.logs, want)) return { found: false, reason: NOT_OURS };
  const head = await chain.getBlockNumber({ cacheTime: 0 });
  return { found: true, transaction: hash, confirmations: Number(head - receipt.blockNumber + 1n) };
}

type UsdcEvent = ReturnType<typeof decodeEventLog<typeof usdcEvents>>;

/** A USDC log decoded, or undefined for any other contract's log or another USDC event. */
function usdcEvent(log: { address: string; data: Hex; topics: Hex[] }): UsdcEvent | undefined {
  if (!same(log.address, USDC_ADDRESS) || log.topics.length === 0) return undefined;
  try {
    return decodeEventLog({ abi: usdcEvents, data: log.data, topics: log.topics as [Hex, ...Hex[]] });
  } catch {
    return undefined; // Approval, Mint, …: not part of a settlement
  }
}

/**
 * True when the logs hold this authorization's own transfer: USDC emits a transfer made with an
 * authorization as AuthorizationUsed(payer, nonce) immediately followed by its Transfer
 * (FiatToken's EIP3009: _markAuthorizationAsUsed, then _transfer). So the log right after this
 * authorization's AuthorizationUsed must be a USDC Transfer of exactly the price from the payer
 * to us. Any other Transfer in the transaction is not this payment: a payer who uses up a second
 * authorization's nonce (say, 0 USDC to himself) in the transaction that makes one real payment
 * must not have both reports count as paid by that one transfer.
 */
function settles(logs: readonly { address: string; data: Hex; topics: Hex[] }[], want: ExpectedSettlement): boolean {
  for (let i = 0; i + 1 < logs.length; i++) {
    const used = usdcEvent(logs[i]!);
    if (used?.eventName !== 'AuthorizationUsed' || !same(used.args.authorizer, want.payer) || !same(used.args.nonce, want.nonce)) continue;
    const moved = usdcEvent(logs[i + 1]!);
    return moved?.eventName === 'Transfer' && same(moved.args.from, want.payer) && same(moved.args.to, want.payTo) && moved.args.value === want.amount;
  }
  return false;
}
