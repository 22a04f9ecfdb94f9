import { getAddress, parseAbi, toEventSelector, type Address, type Hex } from 'viem';
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

const MAX_LOG_INDEX = 2 ** 31 - 1;
/** A 32-byte topic that holds an address: 12 zero bytes, then the 20 bytes of the address. */
const ADDRESS_TOPIC = /^0x0{24}[0-9a-f]{40}$/;
/** The data of a standard Transfer: one 32-byte word, the value. */
const VALUE_DATA = /^0x[0-9a-f]{64}$/;

/**
 * Every USDC Transfer in `logs`, in log order. A log counts only when the USDC contract itself
 * emitted it: any contract can emit an event with the same topic and fake payments otherwise.
 * A log counts only when it has exactly the standard event's shape: the Transfer topic, two
 * address topics (zero-padded) and one 32-byte value. FiatToken emits nothing else; a log of
 * any other shape (an extra topic, longer data, an address word with high bits set) is no
 * transfer, whatever a lenient decoder would make of it. Hex is compared in any letter case.
 */
export function decodeUsdcTransfers(logs: readonly ReceiptLog[]): UsdcTransfer[] {
  const out: UsdcTransfer[] = [];
  for (const log of logs) {
    if (log.removed || log.address.toLowerCase() !== USDC || log.topics.length !== 3) continue;
    const [topic0, fromTopic, toTopic] = log.topics.map((t) => t.toLowerCase());
    const data = log.data.toLowerCase();
    if (topic0 !== TRANSFER_TOPIC || !ADDRESS_TOPIC.test(fromTopic!) || !ADDRESS_TOPIC.test(toTopic!) || !VALUE_DATA.test(data)) continue;
    // A mined log's position in its block: no block holds 2^31 logs (nor can the claims table
    // store such a position). Anything else is the node's garbage, not a payment to judge.
    if (!Number.isSafeInteger(log.logIndex) || log.logIndex! < 0 || log.logIndex! > MAX_LOG_INDEX) {
      throw new Error(`the node answered a USDC transfer log without a valid logIndex (${String(log.logIndex).slice(0, 20)})`);
    }
    const value = BigInt(data);
    out.push({
      from: getAddress(`0x${fromTopic!.slice(26)}`),
      to: getAddress(`0x${toTopic!.slice(26)}`),
      amount: formatUsdc(value),
      amountMicro: value,
      logIndex: log.logIndex!,
    });
  }
  return out;
}

/** The transfer as shown in reports (without the bigint). */
export function publicTransfer(t: UsdcTransfer): { from: Address; to: Address; amount: string; logIndex: number } {
  return { from: t.from, to: t.to, amount: t.amount, logIndex: t.logIndex };
}
