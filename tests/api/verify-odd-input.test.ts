// `paywarden evidence verify` and `receipt verify` on documents edited where no hash or signature
// looks, written ambiguously, or built to crash a verifier: each is refused or reported on with
// the verification's exit codes (1: does not verify, 3: could not check), never passed and never
// a stack trace.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/cli.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { approve, createPolicy, decide, type Created } from '../helpers/policies.js';
import { createChain, randomTxHash, readChain, serviceJwks, settle } from './evidence-helpers.js';

describe('the verify commands on odd documents', () => {
  let t: TestApp;
  let p: Created;
  let dir: string;
  let chain: any;
  let text: string;
  let answer: any;
  const lines: string[] = [];
  const errors: string[] = [];
  const out = { log: (s: string) => lines.push(s), error: (s: string) => errors.push(s) };
  const verify = async (content: string, command: 'evidence' | 'receipt' = 'evidence') => {
    const file = join(dir, `doc-${Math.random()}.json`);
    writeFileSync(file, content);
    lines.length = 0;
    errors.length = 0;
    return run([command, 'verify', file, '--jwks', join(dir, 'jwks.json')], out, {});
  };
  const problems = (): string[] => JSON.parse(lines.join('\n')).problems;

  beforeAll(async () => {
    t = await createTestApp();
    p = await createPolicy(t);
    await new PolicyStore(t.database).setDirectChecks(p.policyId, true, t.clock.now());
    dir = mkdtempSync(join(tmpdir(), 'pw-verify-odd-'));
    writeFileSync(join(dir, 'jwks.json'), JSON.stringify(await serviceJwks(t)));
    const { evidenceChainId } = await createChain(t, p, { amount: '5', expectedFrom: ADDR.carol });
    for (const txHash of [randomTxHash(), randomTxHash()]) expect((await settle(t, evidenceChainId, p.agentKey, { txHash })).statusCode).toBe(200);
    chain = json(await readChain(t, evidenceChainId, p.agentKey));
    text = JSON.stringify(chain, null, 2);
    const pending = await decide(t, p, { amount: '30' });
    answer = json(await approve(t, pending.decision.decisionId, p.adminKey));
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the untouched documents verify, also saved with a UTF-8 byte order mark', async () => {
    expect(await verify(text)).toBe(0);
    expect(await verify(`\ufeff${text}`), errors.join('\n')).toBe(0);
    expect(await verify(JSON.stringify(answer), 'receipt')).toBe(0);
    expect(await verify(`\ufeff${JSON.stringify(answer)}`, 'receipt'), errors.join('\n')).toBe(0);
  });

  it('a member named twice is refused: a reader keeping the first would see another amount or decision', async () => {
    // JSON.parse keeps the genuine last member; the forged first one is what a person may read.
    const forged = text.replace('"amount": "5",', '"amount": "5000",\n    "amount": "5",');
    expect(forged).not.toBe(text);
    expect(await verify(forged)).toBe(1);
    expect(problems()).toEqual([expect.stringMatching(/names a member twice/)]);
    const approval = JSON.stringify(answer).replace('"decision":{', '"decision":{"decision":"APPROVE","amount":"9999",');
    expect(await verify(approval, 'receipt')).toBe(1);
    expect(problems()).toEqual([expect.stringMatching(/names a member twice/)]);
  });

  it('members that no hash or signature covers are refused', async () => {
    const cases: Array<[string, (d: any) => void, RegExp]> = [
      ['beside a settlement event', (d) => (d.events[2].result = 'MATCH'), /^event 3: member\(s\) .*: result$/],
      ['at the top', (d) => (d.reconciliation = 'MATCH'), /^the document: member\(s\) .*: reconciliation$/],
      ['in the head', (d) => (d.head.note = 'settled'), /^head: member\(s\) .*: note$/],
      ['in a link receipt', (d) => (d.events[0].linkReceipt.verified = true), /^event 1: link receipt: member\(s\) .*: verified$/],
      ["the head receipt's unsigned issuedAt", (d) => (d.head.receipt.issuedAt = '1999-01-01T00:00:00.000Z'), /^head: the receipt's issuedAt is not the head's$/],
    ];
    for (const [name, edit, problem] of cases) {
      const d = structuredClone(chain);
      edit(d);
      expect(await verify(JSON.stringify(d)), name).toBe(1);
      expect(problems(), name).toEqual([expect.stringMatching(problem)]);
    }
    expect(await verify(JSON.stringify({ ...answer, note: 'approved by the CFO' }), 'receipt')).toBe(1);
    expect(problems()).toEqual([expect.stringMatching(/^the answer: member\(s\) .*: note$/)]);
  });

  it('a signature whose text was altered does not verify, though a lenient decoder reads the same bytes', async () => {
    const d = structuredClone(chain);
    const s: string = d.events[1].linkReceipt.signature;
    for (const altered of [`${s.slice(0, 10)}!!${s.slice(10)}`, `${s}==`, s.replace(/-/g, '+').replace(/_/g, '/')].filter((x) => x !== s)) {
      d.events[1].linkReceipt.signature = altered;
      expect(await verify(JSON.stringify(d))).toBe(1);
      expect(problems()).toEqual([expect.stringMatching(/^event 2 \(\w+\): link: receipt signature is not 86 base64url characters$/)]);
    }
  });

  it('a document built to exhaust the verifier is reported on, not a crash', async () => {
    const huge = structuredClone(chain);
    huge.evidenceChainId = `ec_${'a'.repeat(5_000_000)}`;
    huge.events = [...huge.events, ...Array(120).fill(huge.events[2])];
    expect(await verify(JSON.stringify(huge))).toBe(1);
    expect(problems()).toEqual([expect.stringMatching(/^not an evidence chain: evidenceChainId ec_a{97}… \(5000003 characters\)/)]);

    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    const nested = `{"decision":{"decisionId":"dec_x","deep":${deep}},"receipt":{"kind":"spend-decision","alg":"EdDSA","subjectId":"dec_x","digest":"sha256:00","keyId":"k","signature":"x"}}`;
    expect(await verify(nested, 'receipt')).toBe(1);
    expect(problems()).toEqual([expect.stringMatching(/^the document could not be checked/)]);

    const infinite = JSON.stringify(answer).replace('"decision":{', '"decision":{"weight":1e400,');
    expect(await verify(infinite, 'receipt')).toBe(1);
    expect(problems()).toEqual([expect.stringMatching(/^the document could not be checked: Infinity/)]);
  }, 120_000);
});
