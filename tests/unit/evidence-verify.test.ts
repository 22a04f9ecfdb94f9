import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { run } from '../../src/cli.js';
import {
  HEAD_RECEIPT_KIND,
  LINK_RECEIPT_KIND,
  headSubject,
  intentDigestOf,
  linkEvent,
  linkSubject,
  normaliseIntent,
  type ChainEvent,
  type ChainHead,
  type Intent,
} from '../../src/features/evidence/hashing.js';
import { receiptProblem, verifyChain } from '../../src/features/evidence/verify.js';
import { relink } from '../helpers/evidence-relink.js';
import { digestOf } from '../../src/platform/canonical.js';
import { ReceiptSigner } from '../../src/platform/receipts.js';

const signer = ReceiptSigner.fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
const jwks = signer.jwks();
const NOW = new Date('2026-01-15T12:00:00.000Z');
const CHAIN = `ec_${'c'.repeat(32)}`;
const intent: Intent = normaliseIntent({ policyId: `sgp_${'a'.repeat(32)}`, agentId: 'agent', requestId: 'r-1', chain: 'base', asset: 'USDC', recipient: `0x${'B'.repeat(40)}`, amount: '2.50' });

/** Signs an event's link, as the store does when it appends one. */
const signLink = (e: ChainEvent): ChainEvent => ({ ...e, linkReceipt: signer.sign(LINK_RECEIPT_KIND, e.evidenceId, linkSubject(CHAIN, e), NOW) });

/** The signed head a read of `events` carries, as the service makes it. */
function headOf(events: ChainEvent[], evidenceChainId = CHAIN): ChainHead {
  const head = { evidenceChainId, length: events.length, headHash: events.at(-1)!.hash, issuedAt: NOW.toISOString() };
  return { ...head, receipt: signer.sign(HEAD_RECEIPT_KIND, evidenceChainId, headSubject(head), NOW) };
}

/** A chain built the way the service builds one: a signed decision, then a signed settlement, each link signed, and a head. */
function build() {
  const intentDigest = intentDigestOf(intent);
  const decision = { decisionId: 'dec_1', policyId: intent.policyId, requestId: 'r-1', agentId: 'agent', recipient: intent.recipient, amount: '2.5', decision: 'APPROVE', executionAuthorized: false };
  const first = signLink(
    linkEvent(CHAIN, intentDigest, undefined, {
      evidenceId: 'ev_1',
      eventType: 'PRECHECK_COMPLETED',
      body: { decision, receipt: signer.sign('spend-decision', 'dec_1', decision, NOW) },
      createdAt: NOW.toISOString(),
    }),
  );
  const body = { txHash: '0xab', result: 'MATCH' };
  const receipt = signer.sign('evidence-settlement_reconciled', CHAIN, { evidenceChainId: CHAIN, eventType: 'SETTLEMENT_RECONCILED', body }, NOW);
  const second = signLink(linkEvent(CHAIN, intentDigest, first, { evidenceId: 'ev_2', eventType: 'SETTLEMENT_RECONCILED', body: { ...body, receipt }, createdAt: NOW.toISOString() }));
  const events = [first, second] as ChainEvent[];
  return { evidenceChainId: CHAIN, policyId: intent.policyId, requestId: 'r-1', intent, intentDigest, createdAt: NOW.toISOString(), events, head: headOf(events) };
}
const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x));

describe('verifyChain', () => {
  it('accepts an intact chain (and its JSON round trip)', () => {
    expect(verifyChain(clone(build()), jwks)).toEqual({
      ok: true,
      evidenceChainId: CHAIN,
      intentDigest: intentDigestOf(intent),
      events: 2,
      receiptsVerified: 2,
      linksVerified: 2,
      headVerified: true,
      problems: [],
      warnings: [],
    });
  });

  it('rejects a changed body, a changed intent, a broken link and a foreign chain id', () => {
    const body = clone(build());
    body.events[1]!.body.result = 'MISMATCH';
    expect(verifyChain(body, jwks).problems).toEqual([
      expect.stringMatching(/event 2 .*hash does not match/),
      expect.stringMatching(/event 2 .*: receipt digest/),
      expect.stringMatching(/event 2 .*: link: receipt digest/),
    ]);

    const changed = clone(build());
    changed.intent.amount = '3';
    expect(verifyChain(changed, jwks).problems.join()).toMatch(/intentDigest .* is not the digest/);

    const unlinked = clone(build());
    unlinked.events = [unlinked.events[1]!];
    expect(verifyChain(unlinked, jwks).ok).toBe(false);

    const moved = clone(build());
    moved.evidenceChainId = `ec_${'d'.repeat(32)}`;
    expect(verifyChain(moved, jwks).problems.join()).toMatch(/hash does not match/);
  });

  it('rejects a chain whose decision is not the decision for its intent', () => {
    const other = clone(build());
    other.events[0]!.body.decision = { ...(other.events[0]!.body.decision as object), recipient: `0x${'1'.repeat(40)}` };
    expect(verifyChain(other, jwks).problems.join()).toMatch(/decision's recipient is not the intent's/);
    for (const [field, value] of [['policyId', `sgp_${'b'.repeat(32)}`], ['requestId', 'r-2'], ['agentId', 'other-agent'], ['amount', '25']] as const) {
      const d = clone(build());
      d.events[0]!.body.decision = { ...(d.events[0]!.body.decision as object), [field]: value };
      expect(verifyChain(d, jwks).problems.join(), field).toContain(`decision's ${field} is not the intent's`);
    }
    const authorized = clone(build());
    authorized.events[0]!.body.decision = { ...(authorized.events[0]!.body.decision as object), executionAuthorized: true };
    expect(verifyChain(authorized, jwks).problems.join()).toMatch(/does not say executionAuthorized false/);
    // Saying nothing about it is not saying false.
    const silent = clone(build());
    delete (silent.events[0]!.body.decision as Record<string, unknown>).executionAuthorized;
    expect(verifyChain(silent, jwks).problems.join()).toMatch(/does not say executionAuthorized false/);
  });

  it('rejects top-level fields (outside every hash) that contradict the intent or the first event', () => {
    const edits: Array<[string, string, RegExp]> = [
      ['policyId', `sgp_${'b'.repeat(32)}`, /policyId differs from the intent/],
      ['requestId', 'r-2', /requestId differs from the intent/],
      ['createdAt', '2026-01-15T13:00:00.000Z', /createdAt differs from the time of the first event/],
    ];
    for (const [field, value, problem] of edits) {
      const doc = clone(build()) as Record<string, unknown>;
      doc[field] = value;
      const v = verifyChain(doc, jwks);
      expect(v.ok, field).toBe(false);
      expect(v.problems.join(), field).toMatch(problem);
    }
  });

  it('rejects a document that is not a chain', () => {
    for (const doc of [null, [], {}, { evidenceChainId: CHAIN, intent: {}, intentDigest: 'x', events: [] }]) expect(verifyChain(doc, jwks).ok).toBe(false);
  });

  it('receiptProblem names what is wrong', () => {
    const subject = { a: 1 };
    const receipt = signer.sign('k', 's', subject, NOW);
    expect(receiptProblem(receipt, subject, 's', jwks)).toBeNull();
    expect(receiptProblem(receipt, subject, 's', jwks, 'k')).toBeNull();
    expect(receiptProblem(receipt, subject, 's', jwks, 'evidence-head')).toMatch(/kind k, expected evidence-head/);
    expect(receiptProblem(receipt, subject, 't', jwks)).toMatch(/subject/);
    expect(receiptProblem({ ...receipt, alg: 'RS256' }, subject, 's', jwks)).toMatch(/alg/);
    expect(receiptProblem({ ...receipt, signature: receipt.signature.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')) }, subject, 's', jwks)).toMatch(/signature/);
    expect(receiptProblem(undefined, subject, 's', jwks)).toBe('receipt missing');
  });

  it('reports a malformed event as a problem, never throws (R3 F12)', () => {
    const doc = clone(build());
    const [first, second] = doc.events;
    // A preflight event without body.input, linked in properly.
    const body = { inputDigest: 'sha256:00' };
    const preflight = linkEvent(CHAIN, doc.intentDigest, first, { evidenceId: 'ev_p', eventType: 'TRANSACTION_PREFLIGHT_COMPLETED', body, createdAt: NOW.toISOString() });
    doc.events = [first!, preflight, second!];
    const v = verifyChain(doc, jwks);
    expect(v.ok).toBe(false);
    expect(v.problems).toEqual(expect.arrayContaining([expect.stringMatching(/^event 2: malformed \(a preflight event needs body.input/)]));

    for (const bad of [null, 7, 'x', [], { ...second, body: null }, { ...second, sequence: '2' }, { ...second, hash: 5 }]) {
      const d = clone(build());
      d.events[1] = bad as never;
      const r = verifyChain(d, jwks);
      expect(r.ok).toBe(false);
      expect(r.problems.join()).toMatch(/event 2: malformed/);
    }
  });

  it('the CLI prints a JSON report with ok false for a malformed event and exits 1', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-verify-'));
    try {
      const doc = clone(build());
      doc.events[1]!.eventType = 'TRANSACTION_PREFLIGHT_COMPLETED';
      writeFileSync(join(dir, 'chain.json'), JSON.stringify(doc));
      writeFileSync(join(dir, 'jwks.json'), JSON.stringify(jwks));
      const lines: string[] = [];
      const errors: string[] = [];
      const code = await run(['evidence', 'verify', join(dir, 'chain.json'), '--jwks', join(dir, 'jwks.json')], { log: (s) => lines.push(s), error: (s) => errors.push(s) }, {});
      expect(code).toBe(1);
      const report = JSON.parse(lines.join('\n'));
      expect(report.ok).toBe(false);
      expect(report.problems.join()).toMatch(/event 2: malformed/);
      expect(errors.join()).toMatch(/does NOT verify/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('fails when the document\'s intent is not exactly the intent that was hashed (R3 F2)', () => {
    const edits: Array<[string, (i: Record<string, unknown>) => void, RegExp]> = [
      ['asset', (i) => (i.asset = 'USDT'), /intent\/asset/],
      ['chain', (i) => (i.chain = 'ethereum'), /intent\/chain/],
      ['an unknown property', (i) => (i.note = 'approved by CFO for 3000 USDC'), /intent\/note/],
      ['a missing property', (i) => delete i.agentId, /intent\/agentId/],
      ['a non-canonical amount', (i) => (i.amount = '2.50'), /normalised form/],
      ['an upper-case recipient', (i) => (i.recipient = String(i.recipient).toUpperCase().replace('0X', '0x')), /normalised form/],
      ['a null expectedFrom', (i) => (i.expectedFrom = null), /intent\/expectedFrom/],
    ];
    for (const [name, edit, problem] of edits) {
      const doc = clone(build());
      edit(doc.intent as unknown as Record<string, unknown>);
      const v = verifyChain(doc, jwks);
      expect(v.ok, name).toBe(false);
      expect(v.problems.join(), name).toMatch(/the intent is malformed/);
      expect(v.problems.join(), name).toMatch(problem);
    }
  });

  describe('whoever holds the JSON cannot rearrange it (R3 F1)', () => {
    const FROM = `0x${'1'.repeat(40)}`;
    const withFrom: Intent = { ...intent, expectedFrom: FROM };

    /** Appends signed events the way the service does, from `events` given as [eventType, body]. */
    function signedChain(spec: Array<[ChainEvent['eventType'], Record<string, unknown>]>, base: Intent = withFrom) {
      const intentDigest = intentDigestOf(base);
      const events: ChainEvent[] = [];
      spec.forEach(([eventType, body], i) => {
        const at = new Date(NOW.getTime() + i * 1000).toISOString();
        events.push(signLink(linkEvent(CHAIN, intentDigest, events.at(-1), { evidenceId: `ev_${i + 1}`, eventType, body, createdAt: at })));
      });
      return { evidenceChainId: CHAIN, policyId: base.policyId, requestId: base.requestId, intent: base, intentDigest, events, head: headOf(events) };
    }
    const decision = { decisionId: 'dec_1', policyId: intent.policyId, requestId: 'r-1', agentId: 'agent', recipient: intent.recipient, amount: '2.5', decision: 'APPROVE', executionAuthorized: false };
    const bodyOf = (eventType: ChainEvent['eventType'], body: Record<string, unknown>) => ({
      ...body,
      receipt: signer.sign(`evidence-${eventType.toLowerCase()}`, CHAIN, { evidenceChainId: CHAIN, eventType, body }, NOW),
    });
    const input = { chain: 'base', to: FROM };
    const PRECHECK: [ChainEvent['eventType'], Record<string, unknown>] = ['PRECHECK_COMPLETED', { decision, receipt: signer.sign('spend-decision', 'dec_1', decision, NOW) }];
    const PREFLIGHT: [ChainEvent['eventType'], Record<string, unknown>] = ['TRANSACTION_PREFLIGHT_COMPLETED', bodyOf('TRANSACTION_PREFLIGHT_COMPLETED', { input, inputDigest: digestOf(input) })];
    const settlement = (result: string, txHash = '0xab'): [ChainEvent['eventType'], Record<string, unknown>] => ['SETTLEMENT_RECONCILED', bodyOf('SETTLEMENT_RECONCILED', { txHash, result })];
    const real = () => clone(signedChain([PRECHECK, PREFLIGHT, settlement('UNKNOWN'), settlement('MATCH')]));


    it('the chain as the service wrote it verifies, links and head included', () => {
      expect(verifyChain(real(), jwks)).toMatchObject({ ok: true, events: 4, receiptsVerified: 4, linksVerified: 4, headVerified: true });
    });

    const attacks: Array<[string, (d: ReturnType<typeof real>) => void, RegExp]> = [
      ['the last event dropped', (d) => d.events.pop(), /head: the chain had 4 event\(s\) when read, this document has 3/],
      ['the last event dropped, head edited to match', (d) => relink(Object.assign(d, { events: d.events.slice(0, 3) })), /head: receipt digest does not match/],
      ['the middle event dropped, relinked', (d) => relink(Object.assign(d, { events: [d.events[0], d.events[2], d.events[3]] })), /event 2 .*link: receipt digest does not match/],
      ['MATCH moved before UNKNOWN, relinked', (d) => relink(Object.assign(d, { events: [d.events[0], d.events[1], d.events[3], d.events[2]] })), /link: receipt digest does not match/],
      ['the UNKNOWN inserted again after MATCH, relinked', (d) => relink(Object.assign(d, { events: [...d.events, clone(d.events[2]!)] })), /event 5: SETTLEMENT_RECONCILED after the final result MATCH/],
      ['createdAt rewritten, relinked', (d) => relink(Object.assign(d, { events: d.events.map((e, i) => (i === 3 ? { ...e, createdAt: '2020-01-01T00:00:00.000Z' } : e)) })), /event 4 .*link: receipt digest/],
      ['evidenceId rewritten, relinked', (d) => relink(Object.assign(d, { events: d.events.map((e, i) => (i === 3 ? { ...e, evidenceId: `ev_${'f'.repeat(32)}` } : e)) })), /event 4 .*link: receipt/],
      ['sequence numbers shifted', (d) => d.events.forEach((e) => (e.sequence += 1)), /sequence 2, expected 1/],
      ['expectedFrom changed, relinked', (d) => relink(Object.assign(d, { intent: { ...d.intent, expectedFrom: `0x${'3'.repeat(40)}` } })), /event 1 .*link: receipt digest/],
      ['expectedFrom removed, relinked', (d) => relink(Object.assign(d, { intent: { ...d.intent, expectedFrom: undefined } })), /event 1 .*link: receipt digest/],
      ['the head removed', (d) => delete (d as { head?: unknown }).head, /no signed head/],
      // The intent's digest recomputed, the events left as signed: only the first prevHash still names the old intent.
      ['expectedFrom changed with its intentDigest, events untouched', (d) => Object.assign(d, { intent: { ...d.intent, expectedFrom: `0x${'3'.repeat(40)}` }, intentDigest: intentDigestOf({ ...d.intent, expectedFrom: `0x${'3'.repeat(40)}` }) }), /event 1: prevHash does not link to the intent digest/],
      // A receipt's kind is not signed (the signature covers the digest alone): it is checked as written.
      ["the head receipt's kind edited", (d) => (d.head.receipt.kind = LINK_RECEIPT_KIND), /head: receipt kind evidence-event, expected evidence-head/],
      [
        'the last event replaced by an unsigned copy of an earlier one, relinked under the same head',
        (d) => {
          const head = d.head;
          const copy: ChainEvent = { ...clone(d.events[2]!), evidenceId: `ev_${'9'.repeat(32)}` };
          delete copy.linkReceipt;
          d.events[3] = copy;
          relink(d);
          d.head = head;
        },
        /head: headHash is not the last event's hash/,
      ],
      // The head says when the chain had that length: its time is signed, though the receipt's own issuedAt is not.
      ['the head read later (both issuedAt edited)', (d) => (d.head.issuedAt = d.head.receipt.issuedAt = '2026-02-01T00:00:00.000Z'), /head: receipt digest does not match/],
      ['the head of another read of a longer chain', (d) => (d.head = headOf([...d.events, d.events[3]!])), /head: the chain had 5/],
    ];
    for (const [name, attack, problem] of attacks) {
      it(`fails when ${name}`, () => {
        const d = real();
        attack(d);
        const v = verifyChain(clone(d), jwks);
        expect(v.ok).toBe(false);
        expect(v.problems.join('\n')).toMatch(problem);
      });
    }

    it('holds a chain the service itself signed to the order it writes events in', () => {
      const cases: Array<[string, Array<[ChainEvent['eventType'], Record<string, unknown>]>, RegExp]> = [
        ['no precheck first', [PREFLIGHT, PRECHECK], /event 1: a chain starts with PRECHECK_COMPLETED/],
        ['two prechecks', [PRECHECK, PRECHECK], /event 2: a second PRECHECK_COMPLETED/],
        ['two preflights', [PRECHECK, PREFLIGHT, PREFLIGHT], /event 3: a second TRANSACTION_PREFLIGHT_COMPLETED \(event 2/],
        ['a settlement of a transaction after its MISMATCH', [PRECHECK, settlement('MISMATCH'), settlement('UNKNOWN')], /event 3: SETTLEMENT_RECONCILED after the final result MISMATCH of event 2/],
        ['a settlement of a transaction after its FAILED', [PRECHECK, settlement('FAILED'), settlement('PENDING', '0xcd'), settlement('FAILED')], /event 4: SETTLEMENT_RECONCILED after the final result FAILED of event 2/],
        ['another transaction after a MATCH', [PRECHECK, settlement('MATCH'), settlement('UNKNOWN', '0xcd')], /event 3: SETTLEMENT_RECONCILED after the final result MATCH of event 2/],
      ];
      for (const [name, spec, problem] of cases) {
        const v = verifyChain(clone(signedChain(spec)), jwks);
        expect(v.ok, name).toBe(false);
        expect(v.problems.join('\n'), name).toMatch(problem);
      }
      // Signed, but in a bad order: a repeated evidenceId and createdAt going back.
      const d = signedChain([PRECHECK, settlement('UNKNOWN'), settlement('PENDING')]);
      const twisted = clone(d);
      twisted.events[2] = { ...twisted.events[2]!, evidenceId: 'ev_2', createdAt: NOW.toISOString() };
      const intentDigest = twisted.intentDigest;
      const resigned = signLink(linkEvent(CHAIN, intentDigest, twisted.events[1], { ...twisted.events[2]!, createdAt: '2025-01-01T00:00:00.000Z' }));
      twisted.events[2] = resigned;
      twisted.head = headOf(twisted.events);
      const v = verifyChain(clone(twisted), jwks);
      expect(v.problems).toEqual([expect.stringMatching(/event 3: evidenceId ev_2 is also event 2's/), expect.stringMatching(/event 3: createdAt .* is before the previous event's/)]);
      // PENDING and UNKNOWN are not final: more settlements may follow, and a preflight may come late.
      expect(verifyChain(clone(signedChain([PRECHECK, settlement('PENDING'), settlement('UNKNOWN'), settlement('MATCH'), PREFLIGHT])), jwks).ok).toBe(true);
      // Nor is another transaction's MISMATCH or FAILED: the payment sent again may follow.
      expect(verifyChain(clone(signedChain([PRECHECK, settlement('FAILED', '0xcd'), settlement('MISMATCH', '0xef'), settlement('MATCH')])), jwks).ok).toBe(true);
    });

    it('fails when a signed preflight\'s inputDigest is not the digest of its recorded input', () => {
      const mismatched = bodyOf('TRANSACTION_PREFLIGHT_COMPLETED', { input, inputDigest: digestOf({ ...input, to: intent.recipient }) });
      const v = verifyChain(clone(signedChain([PRECHECK, ['TRANSACTION_PREFLIGHT_COMPLETED', mismatched]])), jwks);
      expect(v.ok).toBe(false);
      expect(v.problems).toEqual([expect.stringMatching(/^event 2: inputDigest is not the digest of the recorded input/)]);
    });

    it('a chain stored before links were signed verifies under its signed head, with a warning that its links are unsigned', () => {
      const d = real();
      for (const e of d.events.slice(0, 2)) delete e.linkReceipt;
      const v = verifyChain(clone(d), jwks);
      expect(v).toMatchObject({ ok: true, events: 4, receiptsVerified: 4, linksVerified: 2, headVerified: true, problems: [] });
      expect(v.warnings).toEqual([expect.stringMatching(/^event\(s\) 1, 2: no link receipt \(stored before links were signed\).*signed head covers them/)]);
      // Without the head nothing covers them: not ok.
      const headless = clone(d) as Record<string, unknown>;
      delete headless.head;
      const w = verifyChain(headless, jwks);
      expect(w.ok).toBe(false);
      expect(w.problems).toContainEqual(expect.stringMatching(/^event\(s\) 1, 2: no link receipt/));
      // Nor can their links be stripped to rearrange them: the head signs the last hash.
      const stripped = relink(Object.assign(clone(d), { events: [d.events[0], d.events[2], d.events[1], d.events[3]] }));
      for (const e of stripped.events) delete e.linkReceipt;
      expect(verifyChain(stripped, jwks).ok).toBe(false);
      // Nor edited in place (a time moved, still in order) with the head's headHash recomputed: the head signs it.
      const retimed = clone(d);
      retimed.events[1]!.createdAt = new Date(NOW.getTime() + 1500).toISOString();
      relink(retimed);
      for (const e of retimed.events) delete e.linkReceipt;
      expect(verifyChain(retimed, jwks).problems).toEqual([expect.stringMatching(/^head: receipt digest does not match/), expect.stringMatching(/^event\(s\) 1, 2, 3, 4: no link receipt/)]);
    });
  });
});
