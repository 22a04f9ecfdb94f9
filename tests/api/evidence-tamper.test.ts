import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/cli.js';
import { eventHash } from '../../src/features/evidence/hashing.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { verifyChain, type JwksDocument } from '../../src/features/evidence/verify.js';
import { ReceiptSigner } from '../../src/platform/receipts.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';
import { createPolicy, type Created } from '../helpers/policies.js';
import { relink } from '../helpers/evidence-relink.js';
import { createChain, randomTxHash, readChain, serviceJwks, settle } from './evidence-helpers.js';

/**
 * Tamper evidence: whoever edits stored evidence directly in the database (bypassing the
 * service) is caught by `paywarden evidence verify`, which trusts only the chain's own hashes
 * and the service's published keys.
 */
describe('a chain edited in the database no longer verifies', () => {
  let t: TestApp;
  let p: Created;
  let dir: string;
  let jwks: JwksDocument;
  const lines: string[] = [];
  const errors: string[] = [];
  const out = { log: (s: string) => lines.push(s), error: (s: string) => errors.push(s) };

  beforeAll(async () => {
    t = await createTestApp();
    p = await createPolicy(t);
    dir = mkdtempSync(join(tmpdir(), 'paywarden-evidence-'));
    jwks = await serviceJwks(t);
    writeFileSync(join(dir, 'jwks.json'), JSON.stringify(jwks));
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Reads the chain through the API into a file, as an auditor would, and runs the CLI on it. */
  async function auditChain(id: string, jwksArg = join(dir, 'jwks.json')) {
    const chain = json(await readChain(t, id, p.agentKey));
    const file = join(dir, `${id}-${lines.length}.json`);
    writeFileSync(file, JSON.stringify(chain, null, 2));
    lines.length = 0;
    errors.length = 0;
    const code = await run(['evidence', 'verify', file, '--jwks', jwksArg], out, {});
    return { code, chain, report: JSON.parse(lines.join('\n')) as { ok: boolean; problems: string[]; warnings: string[] } };
  }

  it('an untouched chain verifies (exit 0)', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const { code, report } = await auditChain(evidenceChainId);
    expect(report).toMatchObject({ ok: true, evidenceChainId, events: 1, receiptsVerified: 1, problems: [] });
    expect(code).toBe(0);
  });

  it('editing an event body directly in the database breaks its hash (exit 1)', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const row = await t.database.db.selectFrom('evidence_events').selectAll().where('chain_id', '=', evidenceChainId).executeTakeFirstOrThrow();
    const body = JSON.parse(row.body);
    body.decision.amount = '0.5';
    await t.database.db.updateTable('evidence_events').set({ body: JSON.stringify(body) }).where('id', '=', row.id).execute();
    const { code, report } = await auditChain(evidenceChainId);
    expect(code).toBe(1);
    expect(report.ok).toBe(false);
    expect(report.problems).toEqual(expect.arrayContaining([
      expect.stringMatching(/event 1 \(PRECHECK_COMPLETED\): hash does not match its content/),
      expect.stringMatching(/receipt digest does not match the content/),
      expect.stringMatching(/the decision's amount is not the intent's/),
    ]));
    expect(errors.join()).toMatch(/does NOT verify/);
  });

  it('recomputing the hash after the edit does not help: the signed receipt no longer matches', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const row = await t.database.db.selectFrom('evidence_events').selectAll().where('chain_id', '=', evidenceChainId).executeTakeFirstOrThrow();
    const body = JSON.parse(row.body);
    body.decision.decision = 'APPROVE';
    body.decision.reasons = [];
    body.decision.createdAt = '2020-01-01T00:00:00.000Z';
    const hash = eventHash(evidenceChainId, { evidenceId: row.id, sequence: 1, eventType: 'PRECHECK_COMPLETED', body, createdAt: row.created_at, prevHash: row.prev_hash });
    await t.database.db.updateTable('evidence_events').set({ body: JSON.stringify(body), hash }).where('id', '=', row.id).execute();
    const { code, report } = await auditChain(evidenceChainId);
    expect(code).toBe(1);
    // The decision's receipt, and the link signed when the event was appended, both refuse it.
    expect(report.problems).toEqual([
      expect.stringMatching(/event 1 \(PRECHECK_COMPLETED\): receipt digest does not match the content/),
      expect.stringMatching(/event 1 \(PRECHECK_COMPLETED\): link: receipt digest does not match the content/),
    ]);
  });

  it('editing the stored intent breaks the intent digest and the link of the first event', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const row = await t.database.db.selectFrom('evidence_chains').selectAll().where('id', '=', evidenceChainId).executeTakeFirstOrThrow();
    await t.database.db.updateTable('evidence_chains').set({ intent: row.intent.replace('"amount":"5"', '"amount":"4"') }).where('id', '=', evidenceChainId).execute();
    const { code, report } = await auditChain(evidenceChainId);
    expect(code).toBe(1);
    expect(report.problems).toEqual(expect.arrayContaining([expect.stringMatching(/intentDigest .* is not the digest of the intent/)]));
  });

  it('a JWKS without the signing key fails the receipts', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const stranger = ReceiptSigner.fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
    writeFileSync(join(dir, 'stranger.json'), JSON.stringify(stranger.jwks()));
    const { code, report } = await auditChain(evidenceChainId, join(dir, 'stranger.json'));
    expect(code).toBe(1);
    expect(report.problems).toEqual([
      expect.stringMatching(/event 1 .*: no Ed25519 key .* in the JWKS/),
      expect.stringMatching(/event 1 .*: link: no Ed25519 key .* in the JWKS/),
      expect.stringMatching(/head: no Ed25519 key .* in the JWKS/),
    ]);
    // Same kid, other key material: the signature itself fails.
    const forged = { keys: [{ ...stranger.jwk, kid: jwks.keys[0]!.kid }] };
    const chain = json(await readChain(t, evidenceChainId, p.agentKey));
    const problems = verifyChain(chain, forged).problems;
    expect(problems).toHaveLength(3);
    for (const problem of problems) expect(problem).toMatch(/signature does not verify/);
  });

  it('reordering or dropping events is caught', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const chain = json(await readChain(t, evidenceChainId, p.agentKey));
    expect(verifyChain({ ...chain, events: [] }, jwks).ok).toBe(false);
    const renumbered = { ...chain, events: [{ ...chain.events[0], sequence: 2 }] };
    expect(verifyChain(renumbered, jwks).problems.join()).toMatch(/sequence 2, expected 1/);
  });

  it('a chain of the service cut short, rearranged or relinked no longer verifies with only the JWKS (R3 F1)', async () => {
    // PRECHECK, then two UNKNOWN settlements (Base is unreachable here) under direct checks.
    await new PolicyStore(t.database).setDirectChecks(p.policyId, true, t.clock.now());
    const { evidenceChainId } = await createChain(t, p, { amount: '5', expectedFrom: ADDR.carol });
    for (const txHash of [randomTxHash(), randomTxHash()]) expect(json(await settle(t, evidenceChainId, p.agentKey, { txHash })).result).toBe('UNKNOWN');
    const { code, chain } = await auditChain(evidenceChainId);
    expect(code).toBe(0);
    expect(verifyChain(chain, jwks)).toMatchObject({ ok: true, events: 3, linksVerified: 3, headVerified: true });
    const edits: Array<[string, (d: any) => void]> = [
      ['the last event dropped', (d) => d.events.pop()],
      ['the last event dropped and the head edited', (d) => relink(Object.assign(d, { events: d.events.slice(0, 2) }))],
      ['the middle event dropped', (d) => relink(Object.assign(d, { events: [d.events[0], d.events[2]] }))],
      ['the settlements swapped', (d) => relink(Object.assign(d, { events: [d.events[0], d.events[2], d.events[1]] }))],
      ['a settlement duplicated', (d) => relink(Object.assign(d, { events: [...d.events, structuredClone(d.events[1])] }))],
      ['expectedFrom changed', (d) => relink(Object.assign(d, { intent: { ...d.intent, expectedFrom: ADDR.bob.toLowerCase() } }))],
      ['expectedFrom removed', (d) => relink(Object.assign(d, { intent: { ...d.intent, expectedFrom: undefined } }))],
      ['createdAt rewritten', (d) => relink(Object.assign(d, { events: d.events.map((e: any, i: number) => (i === 2 ? { ...e, createdAt: '2030-01-01T00:00:00.000Z' } : e)) }))],
      // No hash covers the chain's own createdAt; the first event's, which must equal it, is covered.
      ['the chain backdated', (d) => Object.assign(d, { createdAt: '2025-01-01T00:00:00.000Z' })],
    ];
    for (const [name, edit] of edits) {
      const d = structuredClone(chain);
      edit(d);
      const file = join(dir, `edited-${name.replace(/\W+/g, '-')}.json`);
      writeFileSync(file, JSON.stringify(d));
      lines.length = 0;
      expect(await run(['evidence', 'verify', file, '--jwks', join(dir, 'jwks.json')], out, {}), name).toBe(1);
      expect(JSON.parse(lines.join('\n')).ok, name).toBe(false);
    }
  });

  it('createdAt never goes back along a chain, even when a request read an earlier clock', async () => {
    await new PolicyStore(t.database).setDirectChecks(p.policyId, true, t.clock.now());
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const created = t.clock.now();
    t.clock.set(new Date(created.getTime() - 60_000).toISOString());
    try {
      expect((await settle(t, evidenceChainId, p.agentKey, { txHash: randomTxHash() })).statusCode).toBe(200);
    } finally {
      t.clock.set(created.toISOString());
    }
    const { code, chain } = await auditChain(evidenceChainId);
    expect(chain.events[1].createdAt).toBe(chain.events[0].createdAt);
    expect(code).toBe(0);
  });

  it('a chain stored before links were signed is still read, and verifies under its head with a warning that its links are unsigned', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    // As an event appended before migration 0009 reads (the column is insert-only to the service).
    await sql`update evidence_events set link_receipt = null where chain_id = ${evidenceChainId}`.execute(t.database.db);
    const res = await readChain(t, evidenceChainId, p.agentKey);
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).events[0].linkReceipt).toBeUndefined();
    const { code, report } = await auditChain(evidenceChainId);
    expect(code).toBe(0);
    expect(report).toMatchObject({ ok: true, receiptsVerified: 1, linksVerified: 0, headVerified: true, problems: [] });
    expect(report.warnings).toEqual([expect.stringMatching(/^event\(s\) 1: no link receipt \(stored before links were signed\)/)]);
  });

  it('reads the JWKS from the service URL; usage errors exit 2, what cannot be read 3 (not checked, rather than 1: does not verify)', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    const address = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const { code } = await auditChain(evidenceChainId, `${address}/.well-known/jwks.json`);
    expect(code).toBe(0);
    expect(await run(['evidence', 'verify', join(dir, 'x.json')], out, {})).toBe(2);
    expect(await run(['evidence', 'verify', '--jwks', join(dir, 'jwks.json')], out, {})).toBe(2);
    expect(await run(['evidence', 'verify', join(dir, 'missing.json'), '--jwks', join(dir, 'jwks.json')], out, {})).toBe(3);
    // A malformed JWKS is named as such, not reported as a chain the audit could not read.
    writeFileSync(join(dir, 'null-key.json'), JSON.stringify({ keys: [null] }));
    const { chain } = await auditChain(evidenceChainId);
    writeFileSync(join(dir, 'chain.json'), JSON.stringify(chain));
    errors.length = 0;
    expect(await run(['evidence', 'verify', join(dir, 'chain.json'), '--jwks', `${address}/no-such-jwks`], out, {})).toBe(3);
    expect(errors.join()).toMatch(/could not check: JWKS .* answered 404/);
    expect(await run(['evidence', 'verify', join(dir, 'chain.json'), '--jwks', join(dir, 'null-key.json')], out, {})).toBe(3);
    expect(errors.join()).toMatch(/the JWKS lists a key that is not an object/);
  });

  it.skipIf(testDialect !== 'sqlite')('the installed bin exits non-zero on a tampered chain', async () => {
    const { evidenceChainId } = await createChain(t, p, { amount: '5' });
    await t.database.db.updateTable('evidence_events').set({ created_at: '2020-01-01T00:00:00.000Z' }).where('chain_id', '=', evidenceChainId).execute();
    const file = join(dir, 'bin.json');
    writeFileSync(file, JSON.stringify(json(await readChain(t, evidenceChainId, p.agentKey))));
    const err = await promisify(execFile)(process.execPath, ['bin/paywarden.mjs', 'evidence', 'verify', file, '--jwks', join(dir, 'jwks.json')]).then(
      () => null,
      (e: { code: number; stdout: string }) => e,
    );
    expect(err?.code).toBe(1);
    expect(JSON.parse(err!.stdout).problems.join()).toMatch(/hash does not match/);
  });
});
