import { readFile } from 'node:fs/promises';
import { digestOf } from '../../platform/canonical.js';
import { repeatsMemberName } from '../../platform/json-members.js';
import { RECEIPT_MEMBERS, isObject, receiptProblem, shown, unknownMembers, verifyChain, type JwksDocument } from './verify.js';

type Out = { log: (s: string) => void; error: (s: string) => void };

export const VERIFY_USAGE = 'evidence verify <chain.json> --jwks <file|url>';
export const RECEIPT_VERIFY_USAGE = 'receipt verify <answer.json> --jwks <file|url>';

/** Reads a JWKS from a file or an http(s) URL (e.g. https://<service>/.well-known/jwks.json). */
async function loadJwks(source: string): Promise<JwksDocument> {
  const text = /^https?:\/\//i.test(source)
    ? await fetch(source, { signal: AbortSignal.timeout(10_000) }).then(async (res) => {
        if (!res.ok) throw new Error(`JWKS ${source} answered ${res.status}`);
        return res.text();
      })
    : await readFile(source, 'utf8');
  const doc = parseDocument(text, 'the JWKS') as JwksDocument;
  if (!doc || !Array.isArray(doc.keys)) throw new Error('the JWKS has no keys array');
  if (!doc.keys.every((k: unknown) => typeof k === 'object' && k !== null && !Array.isArray(k))) throw new Error('the JWKS lists a key that is not an object');
  return doc;
}

/** Thrown when a document's text says two things at once: it cannot be checked, and does not verify. */
class AmbiguousDocument extends Error {}

/**
 * A document's JSON, as written: a leading byte-order mark (Windows tools write one) is not part
 * of it; a member named twice in one object is refused. JSON.parse keeps the last of the two, a
 * person or another reader may see the first: a saved answer could show "APPROVE" and 9999 USDC
 * while the verifier checked the genuine members behind them.
 */
function parseDocument(text: string, what: string): unknown {
  const json = text.startsWith('\uFEFF') ? text.slice(1) : text;
  const value: unknown = JSON.parse(json);
  if (repeatsMemberName(json, value)) throw new AmbiguousDocument(`${what} names a member twice in one object: what it says is ambiguous`);
  return value;
}

/**
 * Exit codes of the verify commands: a script must tell "this does not verify" (1) from "this
 * could not be checked" (3: a file or the JWKS could not be read), which says nothing either way.
 */
export const EXIT = { verified: 0, notVerified: 1, usage: 2, unchecked: 3 } as const;

/**
 * The JSON document and the JWKS a verify command names (`<file> --jwks <file|url>`), or its exit
 * code: 2 on bad usage, 3 when either cannot be read.
 */
async function readArgs(args: string[], usage: string, out: Out): Promise<{ doc: unknown; jwks: JwksDocument; refused?: string } | number> {
  const at = args.indexOf('--jwks');
  const jwksSource = at >= 0 ? args[at + 1] : undefined;
  const files = args.filter((_, i) => at < 0 || (i !== at && i !== at + 1));
  if (!jwksSource || files.length !== 1 || files[0]!.startsWith('--')) {
    out.error(`usage: paywarden ${usage}`);
    return EXIT.usage;
  }
  let text: string;
  let jwks: JwksDocument;
  try {
    text = await readFile(files[0]!, 'utf8');
    jwks = await loadJwks(jwksSource);
  } catch (err) {
    out.error(`paywarden: could not check: ${err instanceof Error ? err.message : String(err)}`);
    return EXIT.unchecked;
  }
  try {
    return { doc: parseDocument(text, 'the document'), jwks };
  } catch (err) {
    if (err instanceof AmbiguousDocument) return { doc: undefined, jwks, refused: err.message };
    out.error(`paywarden: could not check: ${err instanceof Error ? err.message : String(err)}`);
    return EXIT.unchecked;
  }
}

/**
 * `paywarden evidence verify <chain.json> --jwks <file|url>`: prints the verification as JSON;
 * exit code 0 when everything verifies, 1 when anything does not, 2 on bad usage, 3 when the
 * chain or the JWKS cannot be read.
 */
export async function evidenceVerifyCommand(args: string[], out: Out): Promise<number> {
  const read = await readArgs(args, VERIFY_USAGE, out);
  if (typeof read === 'number') return read;
  const result = read.refused !== undefined ? { ok: false, problems: [read.refused] } : verifyChain(read.doc, read.jwks);
  if (!print(out, result)) return EXIT.unchecked;
  if (!result.ok) out.error(`paywarden: evidence chain does NOT verify (${result.problems.length} problem(s))`);
  return result.ok ? EXIT.verified : EXIT.notVerified;
}

/**
 * Why an answer's receipt does not verify (empty when it does). A protected decision's answer
 * (`{ decision, receipt }`: decide, read, approve) has its receipt over the decision; a paid
 * report's (the report's members and `receipt`, or `{ report, receipt }` from a recovery) over
 * its `subject`, which binds the report by its digest.
 */
export function answerReceiptProblems(doc: unknown, jwks: JwksDocument): { kind: string | null; subjectId: string | null; problems: string[] } {
  if (!isObject(doc) || !isObject(doc.receipt)) return { kind: null, subjectId: null, problems: ['the document has no receipt member'] };
  const { receipt, ...rest } = doc;
  const kind = typeof receipt.kind === 'string' ? receipt.kind : null;
  if (kind === 'spend-decision') {
    const decision = doc.decision;
    const subjectId = isObject(decision) && typeof decision.decisionId === 'string' ? decision.decisionId : null;
    if (subjectId === null) return { kind, subjectId, problems: ['the document has no decision with a decisionId'] };
    const problem = receiptProblem(receipt, decision, subjectId, jwks, kind);
    // The decision is signed whole; anything beside it or in the receipt is covered by nothing.
    const unsigned = [...unknownMembers(doc, ['decision', 'receipt'], 'the answer'), ...unknownMembers(receipt, RECEIPT_MEMBERS, 'the receipt')];
    return { kind, subjectId, problems: [...(problem ? [problem] : []), ...unsigned] };
  }
  if (kind === 'paid-report') {
    const report = Object.keys(rest).length === 1 && isObject(rest.report) ? rest.report : rest;
    const subject = receipt.subject;
    if (!isObject(subject) || typeof subject.reportId !== 'string') return { kind, subjectId: null, problems: ['the receipt has no subject with a reportId'] };
    const subjectId = subject.reportId;
    const problems: string[] = [];
    const problem = receiptProblem(receipt, subject, subjectId, jwks, kind);
    if (problem) problems.push(problem);
    problems.push(...unknownMembers(receipt, [...RECEIPT_MEMBERS, 'subject'], 'the receipt'));
    if (subject.reportDigest !== digestOf(report)) problems.push('the report does not match the reportDigest its receipt signs');
    return { kind, subjectId, problems };
  }
  return { kind: kind === null ? null : shown(kind), subjectId: null, problems: [`receipt kind ${shown(receipt.kind)} is not a decision's or a paid report's`] };
}

/**
 * `paywarden receipt verify <answer.json> --jwks <file|url>`: checks the receipt of a saved
 * decision or paid-report answer; prints the result as JSON; exit codes as evidence verify.
 */
export async function receiptVerifyCommand(args: string[], out: Out): Promise<number> {
  const read = await readArgs(args, RECEIPT_VERIFY_USAGE, out);
  if (typeof read === 'number') return read;
  let result: ReturnType<typeof answerReceiptProblems>;
  try {
    result = read.refused !== undefined ? { kind: null, subjectId: null, problems: [read.refused] } : answerReceiptProblems(read.doc, read.jwks);
  } catch (err) {
    // Canonical JSON refuses what no answer of the service holds (1e400, nesting too deep to walk).
    result = { kind: null, subjectId: null, problems: [`the document could not be checked: ${err instanceof Error ? shown(err.message) : 'unreadable'}`] };
  }
  const ok = result.problems.length === 0;
  if (!print(out, { ok, ...result })) return EXIT.unchecked;
  if (!ok) out.error(`paywarden: receipt does NOT verify (${result.problems.join('; ')})`);
  return ok ? EXIT.verified : EXIT.notVerified;
}

/** Prints a verification as JSON; false (after saying why) when it cannot be written out. */
function print(out: Out, result: unknown): boolean {
  try {
    out.log(JSON.stringify(result, null, 2));
    return true;
  } catch (err) {
    out.error(`paywarden: could not check: the result could not be printed (${err instanceof Error ? err.message : String(err)})`);
    return false;
  }
}
