import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { run } from '../../src/cli.js';
import { intentDigestOf, linkEvent, normaliseIntent, type ChainEvent, type Intent } from '../../src/features/evidence/hashing.js';
import { receiptProblem, verifyChain } from '../../src/features/evidence/verify.js';
import { ReceiptSigner } from '../../src/platform/receipts.js';

const signer = ReceiptSigner.fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
const jwks = signer.jwks();
const NOW = new Date('2026-01-15T12:00:00.000Z');
const CHAIN = `ec_${'c'.repeat(32)}`;
const intent: Intent = normaliseIntent({ policyId: `sgp_${'a'.repeat(32)}`, agentId: 'agent', requestId: 'r-1', chain: 'base', asset: 'USDC', recipient: `0x${'B'.repeat(40)}`, amount: '2.50' });

/** A chain built the way the service builds one: a signed decision, then a signed settlement. */
function build() {
  const intentDigest = intentDigestOf(intent);
  const decision = { decisionId: 'dec_1', policyId: intent.policyId, requestId: 'r-1', agentId: 'agent', recipient: intent.recipient, amount: '2.5', decision: 'APPROVE', executionAuthorized: false };
  const first = linkEvent(CHAIN, intentDigest, undefined, {
    evidenceId: 'ev_1',
    eventType: 'PRECHECK_COMPLETED',
    body: { decision, receipt: signer.sign('spend-decision', 'dec_1', decision, NOW) },
    createdAt: NOW.toISOString(),
  });
  const body = { txHash: '0xab', result: 'MATCH' };
  const receipt = signer.sign('evidence-settlement_reconciled', CHAIN, { evidenceChainId: CHAIN, eventType: 'SETTLEMENT_RECONCILED', body }, NOW);
  const second = linkEvent(CHAIN, intentDigest, first, { evidenceId: 'ev_2', eventType: 'SETTLEMENT_RECONCILED', body: { ...body, receipt }, createdAt: NOW.toISOString() });
  return { evidenceChainId: CHAIN, policyId: intent.policyId, requestId: 'r-1', intent, intentDigest, createdAt: NOW.toISOString(), events: [first, second] as ChainEvent[] };
}
const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x));

describe('verifyChain', () => {
  it('accepts an intact chain (and its JSON round trip)', () => {
    expect(verifyChain(clone(build()), jwks)).toEqual({ ok: true, evidenceChainId: CHAIN, intentDigest: intentDigestOf(intent), events: 2, receiptsVerified: 2, problems: [] });
  });

  it('rejects a changed body, a changed intent, a broken link and a foreign chain id', () => {
    const body = clone(build());
    body.events[1]!.body.result = 'MISMATCH';
    expect(verifyChain(body, jwks).problems).toEqual([expect.stringMatching(/event 2 .*hash does not match/), expect.stringMatching(/event 2 .*receipt digest/)]);

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
  });

  it('rejects a document that is not a chain', () => {
    for (const doc of [null, [], {}, { evidenceChainId: CHAIN, intent: {}, intentDigest: 'x', events: [] }]) expect(verifyChain(doc, jwks).ok).toBe(false);
  });

  it('receiptProblem names what is wrong', () => {
    const subject = { a: 1 };
    const receipt = signer.sign('k', 's', subject, NOW);
    expect(receiptProblem(receipt, subject, 's', jwks)).toBeNull();
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
});
