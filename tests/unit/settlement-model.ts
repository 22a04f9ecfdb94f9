// Reference model of settlement matching, written from the specification, DESIGN.md section 3
// ("Settlement results") and the README ("Settlement results, judged against the immutable intent
// from the transaction's USDC Transfer logs"), BEFORE reading src/features/evidence/settlement.ts.
//
// Decisions taken from the documents (see the review report for the reasoning):
//  - UNKNOWN: the transaction is not found, or Base could not be read.
//  - PENDING: not mined (known but no receipt), or confirmations < required depth, where
//    confirmations = head - blockNumber + 1 (README example: a freshly mined tx has
//    "confirmations":1 with "requiredConfirmations":1 and is MATCH; "at least MIN_CONFIRMATIONS").
//  - FAILED: the receipt status is reverted, whatever logs the receipt carries.
//  - Only logs emitted by the USDC contract (address compared case-insensitively) that are
//    well-formed ERC-20 Transfer(address indexed, address indexed, uint256) logs count.
//  - MATCH: ONE such transfer pays the recipient exactly the amount, from expectedFrom when given
//    (README: "one transfer pays the recipient exactly the amount"). Partial transfers that sum to
//    the amount do not match. An extra unrelated transfer does not spoil a matching one.
//  - MISMATCH: a USDC transfer was found but none matches; mismatches lists
//    { field, expected, observed } with field in recipient | amount | expectedFrom
//    (expectedFrom only when the intent has it).
//  - Success with no USDC Transfer at all: the documents do not decide between MISMATCH and
//    UNKNOWN (DESIGN: MISMATCH needs "a USDC transfer was found"; UNKNOWN is "not found").
//    The model only requires "not MATCH, not PENDING, not FAILED" here and records the choice.

export const USDC = '0x833589fcd6edb6e08f4c7c32d4f71b54bda02913';
export const TRANSFER_TOPIC = '0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';

export type ModelLog = { address: string; topics: string[]; data: string };
export type ModelObservation =
  | { kind: 'rpc-error' }
  | { kind: 'not-found' }
  | { kind: 'pending' }
  | { kind: 'mined'; status: 'success' | 'reverted'; blockNumber: bigint; head: bigint; logs: ModelLog[] };
export type ModelIntent = { recipient: string; amount: string; expectedFrom?: string };
export type ModelMismatch = { field: 'recipient' | 'amount' | 'expectedFrom'; expected: string; observed: string };
export type ModelTransfer = { from: string; to: string; value: bigint; logIndex: number };

export type ModelResult =
  | { result: 'UNKNOWN' | 'PENDING' | 'FAILED' | 'MATCH' }
  | { result: 'MISMATCH'; candidates: ModelMismatch[][] } // mismatches must equal one of these (as sets)
  | { result: 'NO_USDC_TRANSFER' }; // MISMATCH or UNKNOWN accepted; never MATCH

const WORD = /^0x[0-9a-f]{64}$/;
const ADDRESS_WORD = /^0x0{24}([0-9a-f]{40})$/;

/** Intent amount (spec grammar) -> micro-USDC. */
export function toMicro(amount: string): bigint {
  const m = /^([0-9]+)(?:\.([0-9]{1,6}))?$/.exec(amount);
  if (!m) throw new Error(`invalid amount ${amount}`);
  return BigInt(m[1]!) * 1_000_000n + BigInt((m[2] ?? '').padEnd(6, '0'));
}

/** micro-USDC -> canonical decimal string. */
export function fromMicro(micro: bigint): string {
  const whole = (micro / 1_000_000n).toString();
  const frac = (micro % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : whole;
}

/** Strict decoding: exactly 3 topics, canonical address words, exactly one 32-byte data word. */
export function decodeTransfer(log: ModelLog, logIndex: number): ModelTransfer | null {
  if (log.address.toLowerCase() !== USDC) return null;
  if (log.topics.length !== 3) return null;
  const [t0, t1, t2] = log.topics.map((t) => t.toLowerCase());
  if (t0 !== TRANSFER_TOPIC) return null;
  const f = ADDRESS_WORD.exec(t1!);
  const t = ADDRESS_WORD.exec(t2!);
  if (!f || !t) return null;
  const data = log.data.toLowerCase();
  if (!WORD.test(data)) return null;
  return { from: `0x${f[1]}`, to: `0x${t[1]}`, value: BigInt(data), logIndex };
}

export type Decoder = (log: ModelLog, logIndex: number) => ModelTransfer | null;

export function diff(intent: ModelIntent, t: ModelTransfer): ModelMismatch[] {
  const out: ModelMismatch[] = [];
  const recipient = intent.recipient.toLowerCase();
  const amount = toMicro(intent.amount);
  if (t.to !== recipient) out.push({ field: 'recipient', expected: recipient, observed: t.to });
  if (t.value !== amount) out.push({ field: 'amount', expected: fromMicro(amount), observed: fromMicro(t.value) });
  if (intent.expectedFrom !== undefined && t.from !== intent.expectedFrom.toLowerCase()) {
    out.push({ field: 'expectedFrom', expected: intent.expectedFrom.toLowerCase(), observed: t.from });
  }
  return out;
}

export function confirmations(blockNumber: bigint, head: bigint): bigint {
  return head - blockNumber + 1n;
}

export function modelSettle(obs: ModelObservation, intent: ModelIntent, required: number, decode: Decoder = decodeTransfer): ModelResult {
  if (obs.kind === 'rpc-error' || obs.kind === 'not-found') return { result: 'UNKNOWN' };
  if (obs.kind === 'pending') return { result: 'PENDING' };
  if (obs.status === 'reverted') return { result: 'FAILED' };
  if (confirmations(obs.blockNumber, obs.head) < BigInt(required)) return { result: 'PENDING' };
  const transfers = obs.logs.map(decode).filter((t): t is ModelTransfer => t !== null);
  if (transfers.length === 0) return { result: 'NO_USDC_TRANSFER' };
  const diffs = transfers.map((t) => diff(intent, t));
  if (diffs.some((d) => d.length === 0)) return { result: 'MATCH' };
  return { result: 'MISMATCH', candidates: diffs };
}

/** A result as the service reports it (the pure matcher or the HTTP answer). */
export interface Reported {
  result: string;
  mismatches: Array<{ field: string; expected: string; observed: string }>;
}

const normValue = (field: string, v: string) => (field === 'amount' ? String(toMicro(v)) : v.toLowerCase());
/** Mismatch lists compared as sets, addresses in any case, amounts by value. */
export const mismatchKey = (ms: Reported['mismatches']) =>
  ms.map((m) => `${m.field}|${normValue(m.field, m.expected)}|${normValue(m.field, m.observed)}`).sort().join(';');

/**
 * null when `got` is what the model allows for `obs`, else the difference. Tolerated where the
 * documents do not decide (see the report): a reverted transaction below the depth may read
 * PENDING; a success without any USDC Transfer may be MISMATCH with no entries, or UNKNOWN; a head
 * behind the receipt's block may count as one confirmation.
 */
export function judge(obs: ModelObservation, intent: ModelIntent, required: number, got: Reported, decode: Decoder = decodeTransfer): string | null {
  const want = modelSettle(obs, intent, required, decode);
  const shallow = obs.kind === 'mined' && confirmations(obs.blockNumber, obs.head) < BigInt(required);
  let ok: boolean;
  if (want.result === 'FAILED') ok = got.result === 'FAILED' || (shallow && got.result === 'PENDING');
  else if (want.result === 'NO_USDC_TRANSFER') ok = (got.result === 'MISMATCH' && got.mismatches.length === 0) || got.result === 'UNKNOWN';
  else if (want.result === 'MISMATCH') ok = got.result === 'MISMATCH' && want.candidates.some((c) => mismatchKey(c) === mismatchKey(got.mismatches));
  else ok = got.result === want.result;
  if (!ok && obs.kind === 'mined' && obs.head < obs.blockNumber) {
    return judge({ ...obs, head: obs.blockNumber }, intent, required, got, decode);
  }
  if (!ok) return `result: model ${JSON.stringify(want)} service ${got.result} ${JSON.stringify(got.mismatches)}`;
  if (got.result !== 'MISMATCH' && got.mismatches.length > 0) return `mismatches listed on ${got.result}`;
  return null;
}
