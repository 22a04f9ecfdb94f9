import { digestOf } from '../../platform/canonical.js';
import { formatUsdc, parseUsdc } from '../../platform/money.js';
import type { Receipt } from '../../platform/receipts.js';

/**
 * The pure arithmetic of evidence chains, shared by the service (which writes chains) and by
 * `paywarden evidence verify` (which audits one without trusting the database).
 *
 * intentDigest = "sha256:" + hex(SHA-256(JCS(normalised intent)))
 *   normalised: the eight intent fields as sent, addresses lower case, amount in canonical
 *   decimal form ("01.50" is not accepted; "1.50" becomes "1.5"); expectedFrom absent when not
 *   given (never null).
 *
 * event hash = "sha256:" + hex(SHA-256(JCS({ evidenceChainId, evidenceId, sequence, eventType,
 *   body, createdAt, prevHash })))
 *   i.e. the event exactly as the API shows it, without `hash`, plus the chain's identifier (so
 *   an event cannot be moved to another chain). prevHash is the intentDigest for sequence 1 and
 *   the previous event's hash after that, so the intent and every event are linked end to end.
 *
 * The hashes alone are unkeyed: whoever holds the JSON can recompute them after an edit. So:
 * - every event carries a `linkReceipt` (kind evidence-event, subjectId its evidenceId), signed
 *   when it is appended over linkSubject = { evidenceChainId, evidenceId, sequence, hash }. Its
 *   hash covers prevHash, so one signed link also covers everything before it, down to the
 *   intent digest (expectedFrom included);
 * - a read of the chain carries a signed `head` = { evidenceChainId, length, headHash, issuedAt,
 *   receipt } (kind evidence-head), so dropping the last events shows too.
 */

export const EVENT_TYPES = ['PRECHECK_COMPLETED', 'TRANSACTION_PREFLIGHT_COMPLETED', 'SETTLEMENT_RECONCILED'] as const;
export type EventType = (typeof EVENT_TYPES)[number];

export interface Intent {
  policyId: string;
  agentId: string;
  requestId: string;
  chain: 'base';
  asset: 'USDC';
  recipient: string;
  amount: string;
  expectedFrom?: string | undefined;
}

export interface ChainEvent {
  evidenceId: string;
  sequence: number;
  eventType: EventType;
  body: Record<string, unknown>;
  createdAt: string;
  prevHash: string;
  hash: string;
  /** The service's signature over linkSubject; absent on events stored before links were signed. */
  linkReceipt?: Receipt;
}

export const LINK_RECEIPT_KIND = 'evidence-event';
export const HEAD_RECEIPT_KIND = 'evidence-head';

/** What an event's link receipt signs. */
export function linkSubject(evidenceChainId: string, event: Pick<ChainEvent, 'evidenceId' | 'sequence' | 'hash'>) {
  return { evidenceChainId, evidenceId: event.evidenceId, sequence: event.sequence, hash: event.hash };
}

/** The signed end of a chain as read: how many events it had and the last one's hash. */
export interface ChainHead {
  evidenceChainId: string;
  length: number;
  headHash: string;
  issuedAt: string;
  receipt: Receipt;
}

/** What a head's receipt signs: the head without its receipt. */
export function headSubject(head: Omit<ChainHead, 'receipt'>) {
  return { evidenceChainId: head.evidenceChainId, length: head.length, headHash: head.headHash, issuedAt: head.issuedAt };
}

export function normaliseIntent(intent: Intent): Intent {
  return {
    policyId: intent.policyId,
    agentId: intent.agentId,
    requestId: intent.requestId,
    chain: 'base',
    asset: 'USDC',
    recipient: intent.recipient.toLowerCase(),
    amount: formatUsdc(parseUsdc(intent.amount)),
    ...(intent.expectedFrom !== undefined ? { expectedFrom: intent.expectedFrom.toLowerCase() } : {}),
  };
}

export function intentDigestOf(intent: Intent): string {
  return digestOf(normaliseIntent(intent));
}

export function eventHash(evidenceChainId: string, event: Omit<ChainEvent, 'hash'>): string {
  return digestOf({
    evidenceChainId,
    evidenceId: event.evidenceId,
    sequence: event.sequence,
    eventType: event.eventType,
    body: event.body,
    createdAt: event.createdAt,
    prevHash: event.prevHash,
  });
}

/** Where the next event links: the intent digest for the first event, else the last hash. */
export function nextLink(intentDigest: string, last: Pick<ChainEvent, 'sequence' | 'hash'> | undefined): { sequence: number; prevHash: string } {
  return last ? { sequence: last.sequence + 1, prevHash: last.hash } : { sequence: 1, prevHash: intentDigest };
}

/** Builds the next event of a chain, hash included. */
export function linkEvent(
  evidenceChainId: string,
  intentDigest: string,
  last: Pick<ChainEvent, 'sequence' | 'hash'> | undefined,
  event: { evidenceId: string; eventType: EventType; body: Record<string, unknown>; createdAt: string },
): ChainEvent {
  const link = nextLink(intentDigest, last);
  const unhashed = { ...event, ...link };
  return { ...unhashed, hash: eventHash(evidenceChainId, unhashed) };
}
