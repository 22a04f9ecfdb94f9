import { createPublicKey, verify as verifySignature } from 'node:crypto';
import { canonicalJson, digestOf } from '../../platform/canonical.js';
import { compileBodyValidator } from '../../platform/http.js';
import {
  EVENT_TYPES,
  HEAD_RECEIPT_KIND,
  LINK_RECEIPT_KIND,
  eventHash,
  headSubject,
  intentDigestOf,
  linkSubject,
  nextLink,
  normaliseIntent,
  type ChainEvent,
  type ChainHead,
  type Intent,
} from './hashing.js';
import { Receipt } from '../spend-policy/protected-schemas.js';
import { ChainEventSchema, ChainHead as ChainHeadSchema, EvidenceChain, EvidenceChainId, Intent as IntentSchema } from './schemas.js';
import { CLOSING_RESULT, FINAL_RESULTS, type SettlementResult } from './settlement.js';

/**
 * Offline audit of a chain as GET /api/evidence-chains/{id} returned it, trusting neither the
 * database nor the service: recomputes the intent digest and every event hash and link, checks
 * the order of events, and verifies every signature against the service's published keys
 * (JWKS): each event's body receipt, each event's link receipt (over its hash, so over its
 * place in the chain and everything before it) and the head (the chain's length and last hash
 * when it was read). Whoever holds the JSON can recompute the hashes, but not these signatures.
 */

export interface JwksDocument {
  keys: Array<{ kty?: string; crv?: string; x?: string; kid?: string }>;
}

export interface ChainVerification {
  ok: boolean;
  evidenceChainId: string | null;
  intentDigest: string | null;
  events: number;
  /** Body receipts (the decision's, the preflight's, each settlement's) that verified */
  receiptsVerified: number;
  /** Events whose link receipt verified */
  linksVerified: number;
  /** Whether the document carried a head whose receipt verified and which matches its events */
  headVerified: boolean;
  problems: string[];
  /** What the audit could not check but does not make the chain fail (events without a link receipt under a verified head) */
  warnings: string[];
}

interface ReceiptLike {
  kind?: unknown;
  subjectId?: unknown;
  digest?: unknown;
  keyId?: unknown;
  alg?: unknown;
  signature?: unknown;
}

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
/** A value of the document as a problem may quote it: at most 100 characters (a file can hold any length). */
export const shown = (v: unknown): string => {
  const s = String(v);
  return s.length > 100 ? `${s.slice(0, 100)}… (${s.length} characters)` : s;
};
/** An Ed25519 signature in unpadded base64url: 64 bytes are 86 characters, nothing else. */
const SIGNATURE = /^[A-Za-z0-9_-]{86}$/;
export const RECEIPT_MEMBERS = Object.keys(Receipt.properties);
const EVENT_MEMBERS = Object.keys(ChainEventSchema.properties);
const HEAD_MEMBERS = Object.keys(ChainHeadSchema.properties);
const CHAIN_MEMBERS = Object.keys(EvidenceChain.properties);

/**
 * Members of `value` (an object) that the service never writes there: none is covered by a hash
 * or a signature, so a copy could carry any text in them (a "result": "MATCH" beside a signed
 * UNKNOWN) and still verify. The document must be as the service returned it.
 */
export function unknownMembers(value: Record<string, unknown>, known: readonly string[], where: string): string[] {
  const extra = Object.keys(value).filter((k) => !known.includes(k));
  return extra.length === 0 ? [] : [`${where}: member(s) the service never writes there, covered by no signature: ${extra.slice(0, 5).map(shown).join(', ')}`];
}
const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

/** Checks one receipt over `subject`; returns the problem, or null when it verifies. */
export function receiptProblem(receipt: unknown, subject: unknown, subjectId: string, jwks: JwksDocument, kind?: string): string | null {
  if (!isObject(receipt)) return 'receipt missing';
  const r = receipt as ReceiptLike;
  if (r.alg !== 'EdDSA') return `receipt alg ${shown(r.alg)} is not EdDSA`;
  if (kind !== undefined && r.kind !== kind) return `receipt kind ${shown(r.kind)}, expected ${kind}`;
  if (r.subjectId !== subjectId) return `receipt names subject ${shown(r.subjectId)}, expected ${shown(subjectId)}`;
  if (typeof r.digest !== 'string' || r.digest !== digestOf(subject)) return 'receipt digest does not match the content';
  const jwk = jwks.keys.find((k) => k.kid === r.keyId);
  if (!jwk || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string') return `no Ed25519 key ${shown(r.keyId)} in the JWKS`;
  // Node's base64url decoder skips what it cannot read: a signature with characters added,
  // padding or +/ would verify while not being the text that was signed.
  if (typeof r.signature !== 'string' || !SIGNATURE.test(r.signature)) return 'receipt signature is not 86 base64url characters';
  try {
    const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' });
    const ok = verifySignature(null, Buffer.from(r.digest.slice('sha256:'.length), 'hex'), key, Buffer.from(r.signature, 'base64url'));
    return ok ? null : 'receipt signature does not verify';
  } catch {
    return 'receipt signature does not verify';
  }
}

/** The decision of a PRECHECK_COMPLETED event must be the decision for this very intent. */
function decisionProblems(decision: Record<string, unknown>, intent: Intent): string[] {
  const want: Record<string, string> = {
    policyId: intent.policyId,
    requestId: intent.requestId,
    agentId: intent.agentId,
    recipient: intent.recipient,
    amount: intent.amount,
  };
  const out: string[] = [];
  for (const [field, expected] of Object.entries(want)) {
    const seen = typeof decision[field] === 'string' ? (decision[field] as string) : '';
    if ((field === 'recipient' ? seen.toLowerCase() : seen) !== expected) out.push(`the decision's ${field} is not the intent's`);
  }
  if (decision.executionAuthorized !== false) out.push('the decision does not say executionAuthorized false');
  return out;
}

const validIntent = compileBodyValidator(IntentSchema, 'intent');
const chainIdPattern = new RegExp((EvidenceChainId as { pattern?: string }).pattern!);
const validChainId = (v: string) => chainIdPattern.test(v);
const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** Why `value` is not an intent as the service stores it (null when it is). */
function strictIntentProblem(value: unknown): string | null {
  try {
    validIntent(value);
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
  const intent = value as Intent;
  return canonicalJson(normaliseIntent(intent)) === canonicalJson(intent) ? null : 'it is not in normalised form (addresses lower case, canonical amount)';
}

/** What makes an event unreadable as one (null when its shape is right). */
function eventShapeProblem(raw: unknown): string | null {
  if (!isObject(raw)) return 'not an object';
  if (!isObject(raw.body)) return 'body is not an object';
  for (const field of ['evidenceId', 'eventType', 'createdAt', 'prevHash', 'hash'] as const) {
    if (typeof raw[field] !== 'string') return `${field} is not a string`;
  }
  if (!Number.isSafeInteger(raw.sequence)) return 'sequence is not an integer';
  if (!(EVENT_TYPES as readonly string[]).includes(raw.eventType as string)) return `unknown eventType ${shown(raw.eventType)}`;
  if (!ISO_INSTANT.test(raw.createdAt as string) || Number.isNaN(Date.parse(raw.createdAt as string))) return 'createdAt is not a UTC date-time';
  if (raw.eventType === 'TRANSACTION_PREFLIGHT_COMPLETED' && (!isObject(raw.body.input) || typeof raw.body.inputDigest !== 'string')) {
    return 'a preflight event needs body.input (an object) and body.inputDigest';
  }
  return null;
}

/**
 * The order the service writes events in: one PRECHECK_COMPLETED, first; at most one preflight;
 * no settlement after a final one (MATCH, MISMATCH, FAILED); each evidenceId once; createdAt
 * never going back. Signatures already bind every event to its place; this names what a
 * rearranged chain looks like, and holds the service to its own rules.
 */
class Grammar {
  private readonly ids = new Map<string, number>();
  private preflightAt = 0;
  /** The chain's MATCH, and each transaction's final result. */
  private matchedAt: { n: number; result: string } | undefined;
  private readonly finalOf = new Map<string, { n: number; result: string }>();
  private lastCreatedAt: string | undefined;

  problems(n: number, e: ChainEvent): string[] {
    const out: string[] = [];
    const at = `event ${n}`;
    if (n === 1 && e.eventType !== 'PRECHECK_COMPLETED') out.push(`${at}: a chain starts with PRECHECK_COMPLETED`);
    if (n > 1 && e.eventType === 'PRECHECK_COMPLETED') out.push(`${at}: a second PRECHECK_COMPLETED (a chain has exactly one, first)`);
    if (e.eventType === 'TRANSACTION_PREFLIGHT_COMPLETED') {
      if (this.preflightAt) out.push(`${at}: a second TRANSACTION_PREFLIGHT_COMPLETED (event ${this.preflightAt} is the chain's preflight)`);
      else this.preflightAt = n;
    }
    if (e.eventType === 'SETTLEMENT_RECONCILED') {
      // After a MATCH nothing more; after another final result, nothing more of that transaction.
      const { result, txHash } = e.body as { result?: unknown; txHash?: unknown };
      const tx = typeof txHash === 'string' ? txHash.toLowerCase() : '';
      const final = this.matchedAt ?? this.finalOf.get(tx);
      if (final) out.push(`${at}: SETTLEMENT_RECONCILED after the final result ${final.result} of event ${final.n}`);
      else if (typeof result === 'string' && FINAL_RESULTS.has(result as SettlementResult)) {
        this.finalOf.set(tx, { n, result });
        if (result === CLOSING_RESULT) this.matchedAt = { n, result };
      }
    }
    const seen = this.ids.get(e.evidenceId);
    if (seen) out.push(`${at}: evidenceId ${shown(e.evidenceId)} is also event ${seen}'s`);
    else this.ids.set(e.evidenceId, n);
    if (this.lastCreatedAt !== undefined && Date.parse(e.createdAt) < Date.parse(this.lastCreatedAt)) out.push(`${at}: createdAt ${shown(e.createdAt)} is before the previous event's`);
    this.lastCreatedAt = e.createdAt;
    return out;
  }
}

/** The head must be signed and describe exactly these events. */
function headProblems(head: unknown, chainId: string, events: unknown[], jwks: JwksDocument): string[] {
  if (head === undefined) return ['no signed head: events may have been cut off the end (read the chain from the service again to get one)'];
  if (!isObject(head)) return ['head: malformed'];
  const h = head as unknown as ChainHead;
  const out: string[] = unknownMembers(head, HEAD_MEMBERS, 'head');
  if (isObject(h.receipt)) {
    out.push(...unknownMembers(h.receipt, RECEIPT_MEMBERS, 'head: receipt'));
    // The receipt's own issuedAt is not signed; the head's is (headSubject): they must agree.
    if (h.receipt.issuedAt !== h.issuedAt) out.push("head: the receipt's issuedAt is not the head's");
  }
  if (h.evidenceChainId !== chainId) out.push('head: names another chain');
  if (h.length !== events.length) out.push(`head: the chain had ${shown(h.length)} event(s) when read, this document has ${events.length}`);
  const last = events.at(-1);
  if (!isObject(last) || h.headHash !== last.hash) out.push("head: headHash is not the last event's hash");
  const problem = receiptProblem(h.receipt, headSubject(h), chainId, jwks, HEAD_RECEIPT_KIND);
  if (problem) out.push(`head: ${problem}`);
  return out;
}

/** A verification report: ok exactly when there is no problem. */
const verification = (problems: string[], warnings: string[], extra: Partial<ChainVerification> = {}): ChainVerification => ({
  evidenceChainId: null,
  intentDigest: null,
  events: 0,
  receiptsVerified: 0,
  linksVerified: 0,
  headVerified: false,
  ...extra,
  problems,
  warnings,
  ok: problems.length === 0,
});

/** The audit of `doc`; anything it did not foresee is one more problem of the report, never a crash. */
export function verifyChain(doc: unknown, jwks: JwksDocument): ChainVerification {
  try {
    return audit(doc, jwks);
  } catch (err) {
    return verification([`the document could not be checked: ${err instanceof Error ? err.message : String(err)}`], []);
  }
}

function audit(doc: unknown, jwks: JwksDocument): ChainVerification {
  const problems: string[] = [];
  const warnings: string[] = [];
  const report = (extra: Partial<ChainVerification> = {}) => verification(problems, warnings, extra);
  if (!isObject(doc) || typeof doc.evidenceChainId !== 'string' || !isObject(doc.intent) || typeof doc.intentDigest !== 'string' || !Array.isArray(doc.events)) {
    problems.push('not an evidence chain: evidenceChainId, intent, intentDigest and events are required');
    return report();
  }
  if (!validChainId(doc.evidenceChainId)) {
    problems.push(`not an evidence chain: evidenceChainId ${shown(doc.evidenceChainId)} is not ec_ and 32 hex characters`);
    return report();
  }
  if (!DIGEST.test(doc.intentDigest)) {
    problems.push(`not an evidence chain: intentDigest ${shown(doc.intentDigest)} is not sha256: and 64 hex characters`);
    return report({ evidenceChainId: doc.evidenceChainId });
  }
  const chainId = doc.evidenceChainId;
  problems.push(...unknownMembers(doc, CHAIN_MEMBERS, 'the document'));
  // The intent exactly as an intent is accepted (no other properties, chain base, asset USDC)
  // and in the normalised form its digest covers: normalising first would let fields the digest
  // fixes or drops (chain, asset, unknown properties) be edited unseen.
  const intentProblem = strictIntentProblem(doc.intent);
  if (intentProblem) {
    problems.push(`the intent is malformed: ${intentProblem}`);
    return report({ evidenceChainId: chainId });
  }
  const intent = doc.intent as unknown as Intent;
  if (intentDigestOf(intent) !== doc.intentDigest) problems.push(`intentDigest ${shown(doc.intentDigest)} is not the digest of the intent (${intentDigestOf(intent)})`);
  if (doc.policyId !== undefined && doc.policyId !== intent.policyId) problems.push('policyId differs from the intent');
  if (doc.requestId !== undefined && doc.requestId !== intent.requestId) problems.push('requestId differs from the intent');
  // A chain is created together with its first event, at one time: that event's hash covers it.
  const first: unknown = doc.events[0];
  if (doc.createdAt !== undefined && isObject(first) && doc.createdAt !== first.createdAt) {
    problems.push('createdAt differs from the time of the first event, when the chain was created');
  }

  let receipts = 0;
  let links = 0;
  const unsigned: number[] = [];
  const grammar = new Grammar();
  let last: ChainEvent | undefined;
  doc.events.forEach((raw, i) => {
    const at = `event ${i + 1}`;
    const malformed = eventShapeProblem(raw);
    if (malformed) {
      problems.push(`${at}: malformed (${malformed})`);
      return;
    }
    problems.push(...unknownMembers(raw as Record<string, unknown>, EVENT_MEMBERS, at));
    const linkReceipt = (raw as Record<string, unknown>).linkReceipt;
    if (isObject(linkReceipt)) problems.push(...unknownMembers(linkReceipt, RECEIPT_MEMBERS, `${at}: link receipt`));
    // Whatever else is odd about the event is a problem of the report, never a crash.
    try {
      const e = raw as unknown as ChainEvent;
      const link = nextLink(doc.intentDigest as string, last);
      const hash = eventHash(chainId, e);
      if (e.sequence !== link.sequence) problems.push(`${at}: sequence ${shown(e.sequence)}, expected ${link.sequence}`);
      if (e.prevHash !== link.prevHash) problems.push(`${at}: prevHash does not link to ${i === 0 ? 'the intent digest' : 'the previous event'}`);
      if (e.hash !== hash) problems.push(`${at} (${e.eventType}): hash does not match its content`);
      problems.push(...grammar.problems(i + 1, e));

      let problem: string | null;
      if (e.eventType === 'PRECHECK_COMPLETED') {
        const decision = isObject(e.body.decision) ? e.body.decision : {};
        problems.push(...decisionProblems(decision, intent).map((p) => `${at}: ${p}`));
        problem = receiptProblem(e.body.receipt, decision, String(decision.decisionId), jwks);
      } else {
        if (e.eventType === 'TRANSACTION_PREFLIGHT_COMPLETED' && e.body.inputDigest !== digestOf(e.body.input)) {
          problems.push(`${at}: inputDigest is not the digest of the recorded input`);
        }
        const { receipt, ...body } = e.body;
        problem = receiptProblem(receipt, { evidenceChainId: chainId, eventType: e.eventType, body }, chainId, jwks);
      }
      if (problem) problems.push(`${at} (${e.eventType}): ${problem}`);
      else receipts++;

      // The link receipt signs the hash recomputed here, so a recomputed chain cannot reuse it.
      if (e.linkReceipt === undefined) unsigned.push(i + 1);
      else {
        const linkProblem = receiptProblem(e.linkReceipt, linkSubject(chainId, { ...e, hash }), e.evidenceId, jwks, LINK_RECEIPT_KIND);
        if (linkProblem) problems.push(`${at} (${e.eventType}): link: ${linkProblem}`);
        else links++;
      }
      last = e;
    } catch (err) {
      problems.push(`${at}: malformed (${err instanceof Error ? err.message : String(err)})`);
    }
  });
  if (doc.events.length === 0) problems.push('the chain has no events');
  const headIssues = headProblems(doc.head, chainId, doc.events, jwks);
  problems.push(...headIssues);
  if (unsigned.length > 0) {
    // Events stored before links were signed have none. A verified head signs the last hash,
    // which covers every event and the intent, so the chain as read cannot have been edited,
    // cut or rearranged since; only their place at the time they were recorded is unsigned.
    // Without a verified head nothing covers them, and the head's problem already fails the audit.
    const unsignedLinks = `event(s) ${unsigned.join(', ')}: no link receipt (stored before links were signed), so their place in the chain was not signed when they were recorded`;
    if (headIssues.length === 0) warnings.push(`${unsignedLinks}; the signed head covers them as read`);
    else problems.push(unsignedLinks);
  }
  return report({
    evidenceChainId: chainId,
    intentDigest: doc.intentDigest,
    events: doc.events.length,
    receiptsVerified: receipts,
    linksVerified: links,
    headVerified: headIssues.length === 0,
  });
}
