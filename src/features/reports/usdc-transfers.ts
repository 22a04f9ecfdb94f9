import { decodeEventLog, parseAbi, toEventSelector, type Address, type Hex } from 'viem';
import { formatUsdc } from '../../platform/money.js';
import { USDC_ADDRESS } from '../../platform/prices.js';

/**
 * Decoding of USDC `Transfer` events from a transaction receipt. Payment proof and settlement
 * matching both read payments from these logs and never from `tx.from` / `tx.to`: relayers
 * (EIP-3009 transferWithAuthorization, x402 facilitators) and smart wallets send the transaction
 * from another address and call a contract other than the recipient.
 */

const transferAbi = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);
export const TRANSFER_TOPIC: Hex = toEventSelector(transferAbi[0]);
const USDC = USDC_ADDRESS.toLowerCase();

/** The parts of a receipt log the decoder reads (viem's `Log` satisfies it). */
export interface ReceiptLog {
  address: string;
  topics: readonly Hex[];
  data: Hex;
  logIndex: number | null;
  removed?: boolean;
}

export interface UsdcTransfer {
  /** Checksummed addresses, as decoded. */
  from: Address;
  to: Address;
  /** Canonical decimal USDC string. */
  amount: string;
  /** Exact amount in micro-USDC; internal only (JSON cannot carry a bigint). */
  amountMicro: bigint;
  logIndex: number;
}

/**
 * Every USDC Transfer in `logs`, in log order. A log counts only when the USDC contract itself
 * emitted it: any contract can emit an event with the same topic and fake payments otherwise.
 * Logs that do not decode as the standard event (wrong topic count or data length) are skipped.
 */
export function decodeUsdcTransfers(logs: readonly ReceiptLog[]): UsdcTransfer[] {
  const out: UsdcTransfer[] = [];
  for (const log of logs) {
    if (log.removed || log.address.toLowerCase() !== USDC) continue;
    if (log.topics[0]?.toLowerCase() !== TRANSFER_TOPIC) continue;
    let args: { from: Address; to: Address; value: bigint };
    try {
      const topics = log.topics as [Hex, ...Hex[]];
      ({ args } = decodeEventLog({ abi: transferAbi, eventName: 'Transfer', topics, data: log.data, strict: true }));
    } catch {
      continue;
    }
    out.push({
      from: args.from,
      to: args.to,
      amount: formatUsdc(args.value),
      amountMicro: args.value,
      logIndex: log.logIndex ?? -1,
    });
  }
  return out;
}

/** The transfer as shown in reports (without the bigint). */
export function publicTransfer(t: UsdcTransfer): { from: Address; to: Address; amount: string; logIndex: number } {
  return { from: t.from, to: t.to, amount: t.amount, logIndex: t.logIndex };
}
