import {
  BaseError,
  BlockNotFoundError,
  RpcRequestError,
  TransactionNotFoundError,
  TransactionReceiptNotFoundError,
  getAddress,
  type Hash,
} from 'viem';
import { Type, type Static } from 'typebox';
import { onBase, upstream, type ChainClient } from '../../platform/chain.js';
import { formatUsdc, parseUsdc } from '../../platform/money.js';
import { NETWORK } from '../../platform/prices.js';
import { Address, Amount, DateTime, StringEnum } from '../../platform/schemas.js';
import type { PaymentProofRequest } from './schemas.js';
import { decodeUsdcTransfers, publicTransfer, type UsdcTransfer } from './usdc-transfers.js';

export const PAYMENT_DECISIONS = ['VERIFIED', 'MISMATCH', 'PENDING', 'FAILED', 'NOT_FOUND'] as const;
export type PaymentDecision = (typeof PAYMENT_DECISIONS)[number];
export type Finality = 'latest' | 'safe' | 'finalized';

/** What the caller expects to have been paid. Addresses in any case; the amount in micro-USDC. */
export interface ExpectedPayment {
  expectedTo: string;
  expectedAmount: bigint;
  expectedFrom?: string | undefined;
}

/** What the chain shows for one transaction. */
export interface PaymentEvidence {
  /** The node knows the transaction (mined or in its mempool). */
  found: boolean;
  /** A receipt exists. */
  mined: boolean;
  status?: 'success' | 'reverted';
  /** Blocks from the receipt's block to the head, both included; 0 when not mined. */
  confirmations: number;
  transfers: UsdcTransfer[];
  /** Reported alongside; the decision rests on `confirmations` alone. */
  finality: Finality | null;
}

export interface Mismatch {
  field: 'to' | 'amount' | 'from';
  expected: string;
  observed: string;
}

export interface PaymentJudgement {
  verdict: { decision: PaymentDecision; verified: boolean };
  reason: string;
  /** Fields that differ on the closest transfer; empty unless MISMATCH. */
  mismatches: Mismatch[];
  /** logIndex of the matching transfer when VERIFIED, else null. */
  matchedLogIndex: number | null;
}

const judged = (decision: PaymentDecision, reason: string, mismatches: Mismatch[] = [], matchedLogIndex: number | null = null): PaymentJudgement => ({
  verdict: { decision, verified: decision === 'VERIFIED' },
  reason,
  mismatches,
  matchedLogIndex,
});

/**
 * Decides whether `evidence` proves the `input` payment. Pure; settlement matching of evidence
 * chains reuses it (VERIFIED maps to MATCH, NOT_FOUND to UNKNOWN). Rules, first that applies:
 * 1. NOT_FOUND: the node does not know the transaction.
 * 2. PENDING: not mined, or fewer than `minConfirmations`. This comes before FAILED on purpose:
 *    a shallow block can be reorganised away, so no outcome is final before the required depth.
 * 3. FAILED: the transaction reverted (it moved nothing, whatever it tried).
 * 4. VERIFIED: one single USDC Transfer pays `expectedTo` (any letter case) exactly
 *    `expectedAmount` (no tolerance, not even 1 micro-USDC), from `expectedFrom` when given.
 *    Several transfers are never summed: a payment is one transfer.
 * 5. MISMATCH: otherwise. `mismatches` lists the differing fields of the closest transfer (to
 *    weighs most, then amount, then from; ties go to the earliest log); with no USDC transfer
 *    at all the reason says so and `mismatches` is empty.
 */
export function judgePayment(input: ExpectedPayment, evidence: PaymentEvidence, minConfirmations: number): PaymentJudgement {
  if (!evidence.found) return judged('NOT_FOUND', 'transaction not found on Base');
  if (!evidence.mined) return judged('PENDING', 'transaction not yet mined');
  if (evidence.confirmations < minConfirmations) {
    return judged('PENDING', `${evidence.confirmations} of ${minConfirmations} required confirmations`);
  }
  if (evidence.status === 'reverted') return judged('FAILED', 'transaction reverted');
  if (evidence.transfers.length === 0) return judged('MISMATCH', 'no USDC transfer in the transaction');

  const to = input.expectedTo.toLowerCase();
  const from = input.expectedFrom?.toLowerCase();
  const fields = (t: UsdcTransfer) => ({
    to: t.to.toLowerCase() === to,
    amount: t.amountMicro === input.expectedAmount,
    from: from === undefined || t.from.toLowerCase() === from,
  });
  let best: UsdcTransfer | undefined;
  let bestScore = -1;
  for (const t of evidence.transfers) {
    const f = fields(t);
    const score = (f.to ? 4 : 0) + (f.amount ? 2 : 0) + (f.from ? 1 : 0);
    if (score === 7) {
      const who = from === undefined ? '' : ' from the expected sender';
      return judged('VERIFIED', `USDC transfer of the expected amount to the expected recipient${who}`, [], t.logIndex);
    }
    if (score > bestScore) [best, bestScore] = [t, score];
  }
  const f = fields(best!);
  const mismatches: Mismatch[] = [];
  if (!f.to) mismatches.push({ field: 'to', expected: getAddress(input.expectedTo), observed: best!.to });
  if (!f.amount) mismatches.push({ field: 'amount', expected: formatUsdc(input.expectedAmount), observed: best!.amount });
  if (!f.from) mismatches.push({ field: 'from', expected: getAddress(input.expectedFrom!), observed: best!.from });
  return judged('MISMATCH', 'no USDC transfer in the transaction matches the expected payment', mismatches);
}

/**
 * Finality label of a block against the node's `safe` and `finalized` heads (null: the node
 * does not serve that tag; -1n: it serves it but has no such block yet).
 */
export function finalityOf(block: bigint, safe: bigint | null, finalized: bigint | null): Finality | null {
  if (safe === null && finalized === null) return null;
  if (finalized !== null && block <= finalized) return 'finalized';
  if (safe !== null && block <= safe) return 'safe';
  return 'latest';
}

const TransferOut = Type.Object({
  from: Address('Sender of the USDC Transfer event (the payer; not necessarily the transaction sender)'),
  to: Address('Recipient of the USDC Transfer event'),
  amount: Amount('Transferred USDC'),
  logIndex: Type.Integer({ description: 'Position of the log in the block' }),
});

export const PaymentProofReport = Type.Object(
  {
    verdict: Type.Object({
      decision: StringEnum(PAYMENT_DECISIONS),
      verified: Type.Boolean({ description: 'true only for VERIFIED' }),
    }),
    reason: Type.String(),
    txHash: Type.String({ description: 'The checked transaction hash, lower case' }),
    chain: Type.Literal('base'),
    network: Type.Literal(NETWORK),
    confirmations: Type.Integer({ minimum: 0, description: 'Blocks from the transaction block to the head, both included' }),
    finality: Type.Union([StringEnum(['latest', 'safe', 'finalized'] as const), Type.Null()], {
      description: "Against the node's safe and finalized block tags; null when the node does not serve them",
    }),
    blockNumber: Type.Union([Type.Integer(), Type.Null()]),
    transfers: Type.Array(TransferOut, { description: 'Every USDC Transfer event the USDC contract emitted in the transaction' }),
    mismatches: Type.Array(
      Type.Object({ field: StringEnum(['to', 'amount', 'from'] as const), expected: Type.String(), observed: Type.String() }),
      { description: 'Differing fields of the closest transfer; empty unless MISMATCH' },
    ),
    expected: Type.Object({ to: Address(), amount: Amount(), from: Type.Optional(Address()) }),
    checkedAt: DateTime(),
  },
  { description: 'Verification of an onchain USDC payment against the expected recipient, amount and sender' },
);
export type PaymentProofReport = Static<typeof PaymentProofReport>;

/** The node answered with a JSON-RPC error that means "no such tag here", not "unavailable". */
const UNSUPPORTED_TAG_CODES = new Set([-32600, -32601, -32602, -32004, -32000]);

async function tagHead(chain: ChainClient, blockTag: 'safe' | 'finalized'): Promise<bigint | null> {
  try {
    return (await chain.getBlock({ blockTag })).number;
  } catch (e) {
    if (e instanceof BlockNotFoundError) return -1n;
    const rpc = e instanceof BaseError ? (e.walk((c) => c instanceof RpcRequestError) as RpcRequestError | null) : null;
    if (rpc && UNSUPPORTED_TAG_CODES.has(rpc.code) && (rpc.status ?? 200) < 500) return null;
    throw e;
  }
}

const orNull = <T>(p: Promise<T>, missing: new (...a: never[]) => Error): Promise<T | null> =>
  p.catch((e: unknown) => {
    if (e instanceof missing) return null;
    throw e;
  });

/**
 * RPC calls: the receipt, the head and the safe and finalized heads, in parallel (4 calls, one
 * round trip); only without a receipt a 5th, eth_getTransactionByHash, tells pending from
 * unknown; with `blockTime`, a mined transaction's block is read too, for its `minedAt`. Any
 * transport failure is a 502 and nothing is judged.
 */
export async function gatherEvidence(
  chain: ChainClient,
  hash: Hash,
  opts: { blockTime?: boolean } = {},
): Promise<{ evidence: PaymentEvidence; blockNumber: bigint | null; minedAt?: Date }> {
  return upstream(async () => {
    const [receipt, head, safe, finalized] = await Promise.all([
      onBase(chain).then(() => orNull(chain.getTransactionReceipt({ hash }), TransactionReceiptNotFoundError)),
      chain.getBlockNumber({ cacheTime: 0 }),
      tagHead(chain, 'safe'),
      tagHead(chain, 'finalized'),
    ]);
    if (!receipt) {
      // A transaction mined between the two calls still reads as pending: without its receipt
      // there is nothing to judge, and asking again gives the answer.
      const tx = await orNull(chain.getTransaction({ hash }), TransactionNotFoundError);
      const evidence: PaymentEvidence = { found: tx !== null, mined: false, confirmations: 0, transfers: [], finality: null };
      return { evidence, blockNumber: null };
    }
    // The receipt must be the one asked for, with a status Base gives (success or reverted):
    // anything else is the node's garbage and would be judged as if it were this payment.
    if (String(receipt.transactionHash).toLowerCase() !== hash.toLowerCase() || (receipt.status !== 'success' && receipt.status !== 'reverted')) {
      throw new Error('the node answered a receipt that is not of this transaction, or has no known status');
    }
    // A load-balanced node can lag behind the one that served the receipt: a mined
    // transaction has at least its own block as confirmation.
    const depth = head - receipt.blockNumber + 1n;
    const evidence: PaymentEvidence = {
      found: true,
      mined: true,
      status: receipt.status,
      confirmations: Number(depth < 1n ? 1n : depth),
      transfers: decodeUsdcTransfers(receipt.logs),
      finality: finalityOf(receipt.blockNumber, safe, finalized),
    };
    if (!opts.blockTime) return { evidence, blockNumber: receipt.blockNumber };
    // One more round trip, only for those who ask: when the transaction was mined.
    const block = await chain.getBlock({ blockNumber: receipt.blockNumber });
    return { evidence, blockNumber: receipt.blockNumber, minedAt: new Date(Number(block.timestamp) * 1000) };
  });
}

/** The payment-proof report for a validated request body. Throws AppError upstream_unavailable (502). */
export async function paymentProof(
  chain: ChainClient,
  input: Static<typeof PaymentProofRequest>,
  minConfirmations: number,
  now: Date,
): Promise<PaymentProofReport> {
  const txHash = input.txHash.toLowerCase() as Hash;
  const expected: ExpectedPayment = {
    expectedTo: input.expectedTo,
    expectedAmount: parseUsdc(input.expectedAmount),
    expectedFrom: input.expectedFrom,
  };
  const { evidence, blockNumber } = await gatherEvidence(chain, txHash);
  const { verdict, reason, mismatches } = judgePayment(expected, evidence, minConfirmations);
  return {
    verdict,
    reason,
    txHash,
    chain: 'base',
    network: NETWORK,
    confirmations: evidence.confirmations,
    finality: evidence.finality,
    blockNumber: blockNumber === null ? null : Number(blockNumber),
    transfers: evidence.transfers.map(publicTransfer),
    mismatches,
    expected: {
      to: getAddress(input.expectedTo),
      amount: formatUsdc(expected.expectedAmount),
      ...(input.expectedFrom ? { from: getAddress(input.expectedFrom) } : {}),
    },
    checkedAt: now.toISOString(),
  };
}
