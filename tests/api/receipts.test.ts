import { createHash, generateKeyPairSync, verify as nodeVerify, type KeyObject } from 'node:crypto';
import { calculateJwkThumbprint, importJWK, type JWK } from 'jose';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { approve, bearer, createPolicy, decide, readDecision } from '../helpers/policies.js';
import { verifyReceiptWithCli } from '../helpers/receipt-cli.js';
import { forgetGeneratedKey, withdrawReceiptKey } from '../../src/platform/receipts.js';

/**
 * Receipts are checked here the way an outsider would: only the public JWKS, `jose` to import
 * the key, WebCrypto to verify, and a canonical-JSON (RFC 8785) writer of our own. Nothing of
 * the service's code (not its `canonicalize` dependency) is used to verify.
 */

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** RFC 8785 for plain JSON values: keys sorted by UTF-16 code units, no white space. */
function jcs(value: Json): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError('not JSON');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(jcs).join(',')}]`;
  // The default sort compares UTF-16 code units, which is what RFC 8785 asks for.
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${jcs(value[k]!)}`).join(',')}}`;
}

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest();

interface Receipt {
  receiptId: string;
  kind: string;
  subjectId: string;
  digest: string;
  issuedAt: string;
  keyId: string;
  alg: string;
  signature: string;
}

type PublicKey = CryptoKey | KeyObject | Uint8Array;

async function verifySignature(key: PublicKey, signature: Uint8Array, data: Uint8Array): Promise<boolean> {
  if (typeof (key as CryptoKey).algorithm === 'object' && 'usages' in (key as CryptoKey)) {
    return crypto.subtle.verify('Ed25519', key as CryptoKey, new Uint8Array(signature), new Uint8Array(data));
  }
  return nodeVerify(null, data, key as KeyObject, signature);
}

/** Recomputes the digest of `subject` and checks the receipt's signature over those 32 bytes. */
async function verifyReceipt(subject: Json, receipt: Receipt, key: PublicKey): Promise<{ digestMatches: boolean; signatureValid: boolean }> {
  const digest = sha256(jcs(subject));
  const digestMatches = receipt.digest === `sha256:${digest.toString('hex')}`;
  const signature = Buffer.from(receipt.signature, 'base64url');
  const signatureValid = await verifySignature(key, signature, digest);
  return { digestMatches, signatureValid };
}

async function expectVerifies(subject: Json, receipt: Receipt, key: PublicKey) {
  expect(await verifyReceipt(subject, receipt, key)).toEqual({ digestMatches: true, signatureValid: true });
}

async function expectFails(subject: Json, receipt: Receipt, key: PublicKey) {
  const r = await verifyReceipt(subject, receipt, key);
  expect(r.digestMatches).toBe(false);
  expect(r.signatureValid).toBe(false);
}

describe('our canonical JSON writer', () => {
  it('follows RFC 8785 for plain values', () => {
    expect(jcs({ b: 1, a: [true, null, 'x', { d: 2, c: 0.5 }], '': -0 })).toBe('{"":0,"a":[true,null,"x",{"c":0.5,"d":2}],"b":1}');
    // UTF-16 code unit order: "\u20ac" (U+20AC) sorts before "\ud83d\ude00" (U+1F600), and upper case before lower.
    expect(jcs({ '😀': 1, '€': 2, a: 3, B: 4 })).toBe('{"B":4,"a":3,"€":2,"😀":1}');
    expect(jcs({ n: 1e21, m: 1e-7, s: 'line\nbreak "q"' })).toBe('{"m":1e-7,"n":1e+21,"s":"line\\nbreak \\"q\\""}');
  });
});

describe('decision receipts', () => {
  let t: TestApp;
  let jwks: { keys: Array<JWK & { kid: string }> };
  const keyFor = async (receipt: Receipt) => {
    const jwk = jwks.keys.find((k) => k.kid === receipt.keyId);
    expect(jwk, `no key ${receipt.keyId} in the JWKS`).toBeDefined();
    return (await importJWK(jwk!, 'EdDSA')) as PublicKey;
  };

  beforeAll(async () => {
    t = await createTestApp();
    const res = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
    expect(res.statusCode, res.body).toBe(200);
    expect(String(res.headers['content-type'])).toMatch(/json/);
    jwks = json(res);
  });
  afterAll(async () => {
    await t.close();
  });
  beforeEach(() => {
    t.clock.set('2026-01-15T12:00:00.000Z');
  });

  it('the JWKS holds one public Ed25519 key whose kid is its RFC 7638 thumbprint and the receipts\' keyId', async () => {
    expect(jwks.keys.length).toBeGreaterThanOrEqual(1);
    const [jwk] = jwks.keys;
    expect(jwk).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' });
    expect(jwk).not.toHaveProperty('d');
    expect(Buffer.from(jwk!.x!, 'base64url').length).toBe(32);
    expect(jwk!.kid).toBe(await calculateJwkThumbprint(jwk!, 'sha256'));

    const p = await createPolicy(t);
    const { receipt } = await decide(t, p, { amount: '1' });
    expect(receipt.keyId).toBe(jwk!.kid);
    expect(receipt.alg).toBe('EdDSA');
  });

  it('a decision receipt verifies with only the JWKS, and changing one field breaks it', async () => {
    const p = await createPolicy(t);
    const { decision, receipt } = await decide(t, p, { amount: '12.5' });
    expect(receipt.subjectId).toBe(decision.decisionId);
    const key = await keyFor(receipt);
    await expectVerifies(decision, receipt, key);

    // Change one field at a time: the digest no longer matches and the signature fails.
    const tampered: Array<Record<string, Json>> = [
      { ...decision, amount: '12.6' },
      { ...decision, amount: '12.50' },
      { ...decision, decision: 'BLOCK' },
      { ...decision, reasons: ['exceeds_daily_budget'] },
      { ...decision, executionAuthorized: true },
      { ...decision, recipient: decision.recipient.toUpperCase() },
      { ...decision, policyRevision: decision.policyRevision + 1 },
      { ...decision, createdAt: '2026-01-15T12:00:00.001Z' },
      { ...decision, extra: null },
    ];
    for (const changed of tampered) await expectFails(changed, receipt, key);

    // A changed signature, or another key, does not verify the genuine decision either.
    const sig = Buffer.from(receipt.signature, 'base64url');
    sig[0] = sig[0]! ^ 1;
    expect((await verifyReceipt(decision, { ...receipt, signature: sig.toString('base64url') }, key)).signatureValid).toBe(false);
    const stranger = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' });
    const strangerKey = (await importJWK({ ...stranger, alg: 'EdDSA' }, 'EdDSA')) as PublicKey;
    expect((await verifyReceipt(decision, receipt, strangerKey)).signatureValid).toBe(false);
  });

  it('BLOCK and HUMAN_APPROVAL receipts verify too, also when read back later', async () => {
    const p = await createPolicy(t);
    for (const amount of ['60', '30']) {
      const made = await decide(t, p, { amount });
      expect(made.decision.decision).toBe(amount === '60' ? 'BLOCK' : 'HUMAN_APPROVAL');
      await expectVerifies(made.decision, made.receipt, await keyFor(made.receipt));
      t.clock.advance(60_000);
      const read = json(await readDecision(t, made.decision.decisionId, bearer(p.agentKey)));
      await expectVerifies(read.decision, read.receipt, await keyFor(read.receipt));
    }
  });

  it("an approved decision's receipt verifies against the approved state, not the pending one", async () => {
    const p = await createPolicy(t);
    const pending = await decide(t, p, { amount: '30' });
    expect(pending.decision.approval.status).toBe('PENDING');
    t.clock.advance(10 * 60_000);
    const res = await approve(t, pending.decision.decisionId, p.adminKey, { note: 'checked' });
    expect(res.statusCode, res.body).toBe(200);
    const approved = json(res);
    const key = await keyFor(approved.receipt);

    await expectVerifies(approved.decision, approved.receipt, key);
    expect(approved.receipt.receiptId).not.toBe(pending.receipt.receiptId);
    await expectFails(pending.decision, approved.receipt, key);
    await expectFails(approved.decision, pending.receipt, key);
    await expectFails({ ...approved.decision, approval: { ...approved.decision.approval, approvedAt: null } }, approved.receipt, key);

    const read = json(await readDecision(t, pending.decision.decisionId, bearer(p.adminKey)));
    expect(read.decision.approval.status).toBe('ADMIN_APPROVED');
    await expectVerifies(read.decision, read.receipt, key);
  });

  it('`paywarden receipt verify` passes the answers of decide, approve and read, and fails any changed one', async () => {
    const p = await createPolicy(t);
    const approved = await decide(t, p, { amount: '3' });
    const pending = await decide(t, p, { amount: '30' });
    const approval = json(await approve(t, pending.decision.decisionId, p.adminKey));
    const read = json(await readDecision(t, pending.decision.decisionId, bearer(p.agentKey)));
    for (const answer of [approved, pending, approval, read]) {
      const r = await verifyReceiptWithCli(answer, jwks);
      expect(r.code, r.err).toBe(0);
      expect(JSON.parse(r.out)).toEqual({ ok: true, kind: 'spend-decision', subjectId: answer.decision.decisionId, problems: [] });
    }
    const sig = Buffer.from(approved.receipt.signature, 'base64url');
    sig[5] = sig[5]! ^ 1;
    const changed = [
      { ...approved, decision: { ...approved.decision, amount: '4' } },
      { ...approval, decision: pending.decision },
      { ...approved, receipt: { ...approved.receipt, signature: sig.toString('base64url') } },
      { decision: approved.decision },
    ];
    for (const answer of changed) {
      const r = await verifyReceiptWithCli(answer, jwks);
      expect(r.code, JSON.stringify(answer)).toBe(1);
      expect(r.err).toMatch(/receipt does NOT verify/);
    }
    // Another service's keys do not verify it either.
    const stranger = { keys: [{ ...generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }), kid: approved.receipt.keyId }] };
    expect((await verifyReceiptWithCli(approved, stranger)).code).toBe(1);
  });

  it('the answer to a read verifies also once a pending request has expired', async () => {
    const p = await createPolicy(t);
    const pending = await decide(t, p, { amount: '30' });
    t.clock.advance(t.config.approvalTtlSeconds * 1000 + 1000);
    const read = json(await readDecision(t, pending.decision.decisionId, bearer(p.adminKey)));
    expect(read.decision.approval.status).toBe('EXPIRED');
    await expectVerifies(read.decision, read.receipt, await keyFor(read.receipt));
    // The same holds for an exact retry of the request, answered from storage.
    const retry = await decide(t, p, { requestId: pending.decision.requestId, amount: '30' });
    expect(retry.decision).toEqual(read.decision);
    await expectVerifies(retry.decision, retry.receipt, await keyFor(retry.receipt));
    // The receipt issued at decision time still verifies the decision as it was then.
    await expectVerifies(pending.decision, pending.receipt, await keyFor(pending.receipt));
  });

  it('a decision read after the signing key changed gets a fresh receipt from the new key', async () => {
    const p = await createPolicy(t);
    const made = await decide(t, p, { amount: '2' });
    const seed = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }).d!;
    const rotated = await createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: seed } });
    try {
      const newJwks = json(await rotated.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }));
      expect(newJwks.keys[0].kid).not.toBe(made.receipt.keyId);
      const read = json(await readDecision(rotated, made.decision.decisionId, bearer(p.agentKey)));
      expect(read.decision).toEqual(made.decision);
      expect(read.receipt.keyId).toBe(newJwks.keys[0].kid);
      expect(read.receipt.receiptId).not.toBe(made.receipt.receiptId);
      const key = (await importJWK({ ...newJwks.keys[0], alg: 'EdDSA' }, 'EdDSA')) as PublicKey;
      await expectVerifies(read.decision, read.receipt, key);
      // The old key stays published: receipts it signed (those inside evidence chains cannot
      // be signed again) still verify with the JWKS alone, on either instance.
      expect(newJwks.keys.map((k: { kid: string }) => k.kid)).toEqual([read.receipt.keyId, made.receipt.keyId]);
      await expectVerifies(made.decision, made.receipt, (await importJWK({ ...newJwks.keys[1], alg: 'EdDSA' }, 'EdDSA')) as PublicKey);
      const oldJwks = json(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }));
      expect(oldJwks.keys.map((k: { kid: string }) => k.kid)).toEqual([made.receipt.keyId, read.receipt.keyId]);
    } finally {
      await rotated.app.close();
    }
  });

  it('upgrading with RECEIPT_SIGNING_KEY set keeps the key generated before in the JWKS', async () => {
    // A database from before keys were published: only the generated private key is in kv.
    const p = await createPolicy(t);
    const made = await decide(t, p, { amount: '3' });
    await t.database.db.deleteFrom('kv').where('key', '!=', 'receipt_signing_key').execute();
    const seed = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }).d!;
    const upgraded = await createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: seed } });
    try {
      const published = json(await upgraded.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }));
      expect(published.keys.map((k: { kid: string }) => k.kid)).toContain(made.receipt.keyId);
    } finally {
      await upgraded.app.close();
    }
  });

  it('a RECEIPT_SIGNING_KEY PEM that is not a private key stops the start naming the variable', async () => {
    const pem = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
    await expect(createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: pem } })).rejects.toThrow(/^RECEIPT_SIGNING_KEY: /);
  });

  it('a damaged generated key in the database stops a start naming its row; with RECEIPT_SIGNING_KEY set the service starts', async () => {
    const own = await createTestApp();
    try {
      await own.database.db.updateTable('kv').set({ value: '-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n' }).where('key', '=', 'receipt_signing_key').execute();
      await expect(createTestApp({ database: own.database, clock: own.clock })).rejects.toThrow(/^the receipt signing key kept in the database \(table kv, key receipt_signing_key\) cannot be read .*set RECEIPT_SIGNING_KEY/);
      const seed = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }).d!;
      const configured = await createTestApp({ database: own.database, clock: own.clock, config: { receiptSigningKey: seed } });
      try {
        const p = await createPolicy(configured);
        const made = await decide(configured, p, { amount: '2' });
        const jwks = json(await configured.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }));
        expect((await verifyReceiptWithCli(made, jwks)).code).toBe(0);
      } finally {
        await configured.app.close();
      }
    } finally {
      await own.close();
    }
  });

  it('another instance on the same database signs with the same published key', async () => {
    const second = await createTestApp({ database: t.database, clock: t.clock });
    try {
      const other = json(await second.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }));
      expect(other.keys[0]).toEqual(jwks.keys[0]);
      const p = await createPolicy(second);
      const made = await decide(second, p, { amount: '2' });
      await expectVerifies(made.decision, made.receipt, await keyFor(made.receipt));
    } finally {
      await second.app.close();
    }
  });
});

describe('withdrawing a receipt key that leaked', () => {
  const kids = async (t: TestApp) => json(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).keys.map((k: { kid: string }) => k.kid);
  const newSeed = () => generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }).d!;

  it('the generated key leaves the JWKS at once, is deleted, and no restart publishes it again', async () => {
    const t = await createTestApp();
    const restarted: TestApp[] = [];
    try {
      const p = await createPolicy(t);
      const made = await decide(t, p, { amount: '1' });
      const pending = await decide(t, p, { amount: '30' });
      const approved = json(await approve(t, pending.decision.decisionId, p.adminKey));
      const leaked = made.receipt.keyId;
      expect(approved.receipt.keyId).toBe(leaked);
      expect(await kids(t)).toEqual([leaked]);
      expect(await withdrawReceiptKey(t.database, leaked)).toEqual({ kid: leaked, generatedKeyDeleted: true });
      // The running instance still holds the key, but no longer publishes it.
      expect(await kids(t)).toEqual([]);

      // A restart without RECEIPT_SIGNING_KEY generates a new key and never lists the old one.
      restarted.push(await createTestApp({ database: t.database, clock: t.clock }));
      const [fresh] = await kids(restarted[0]!);
      expect(fresh).not.toBe(leaked);
      expect(await kids(restarted[0]!)).toEqual([fresh]);
      const read = json(await readDecision(restarted[0]!, made.decision.decisionId, bearer(p.agentKey)));
      expect(read.receipt.keyId).toBe(fresh);
      // An approved decision's receipt, stored signed by the withdrawn key, is re-issued too: it
      // verifies with the JWKS alone, read and on an exact retry of its request.
      const approvedRead = json(await readDecision(restarted[0]!, approved.decision.decisionId, bearer(p.agentKey)));
      expect(approvedRead.decision).toEqual(approved.decision);
      expect(approvedRead.receipt.keyId).toBe(fresh);
      const jwks = json(await restarted[0]!.app.inject({ method: 'GET', url: '/.well-known/jwks.json' }));
      expect((await verifyReceiptWithCli(approvedRead, jwks)).code).toBe(0);
      const retried = await decide(restarted[0]!, p, { requestId: pending.decision.requestId, amount: '30' });
      expect(retried.receipt.keyId).toBe(fresh);
      expect((await verifyReceiptWithCli(retried, jwks)).code).toBe(0);

      // Nor a restart with a configured key: the generated key it used to publish is gone.
      restarted.push(await createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: newSeed() } }));
      expect(await kids(restarted[1]!)).not.toContain(leaked);
      expect(await kids(restarted[0]!)).not.toContain(leaked);
    } finally {
      for (const r of restarted) await r.app.close();
      await t.close();
    }
  });

  it('a start that read the generated key just as it was withdrawn generates a new one instead of failing', async () => {
    const t = await createTestApp();
    try {
      const [leaked] = await kids(t);
      // What such a start sees: the withdrawal marker, and the private key it had read before.
      await t.database.db.insertInto('kv').values({ key: `receipt_withdrawn_key:${leaked}`, value: 'x', created_at: new Date().toISOString() }).execute();
      const restarted = await createTestApp({ database: t.database, clock: t.clock });
      try {
        const [fresh] = await kids(restarted);
        expect(fresh).not.toBe(leaked);
        expect(await kids(restarted)).toEqual([fresh]);
      } finally {
        await restarted.app.close();
      }
    } finally {
      await t.close();
    }
  });

  it('the generated private key can be deleted once a key is configured: its public key stays published, its receipts still verify', async () => {
    const t = await createTestApp();
    const configured = await createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: newSeed() } });
    try {
      const p = await createPolicy(t);
      const made = await decide(t, p, { amount: '1' });
      const generated = made.receipt.keyId;
      // As in a database from before keys were published: only the private key names it.
      await t.database.db.deleteFrom('kv').where('key', '=', `receipt_public_key:${generated}`).execute();
      expect(await kids(configured)).not.toContain(generated);
      expect(await forgetGeneratedKey(t.database)).toBe(generated);
      expect(await t.database.db.selectFrom('kv').select('key').where('key', '=', 'receipt_signing_key').executeTakeFirst()).toBeUndefined();
      expect(await kids(configured)).toContain(generated);
      const key = json(await configured.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).keys.find((k: { kid: string }) => k.kid === generated);
      await expectVerifies(made.decision, made.receipt, (await importJWK({ ...key, alg: 'EdDSA' }, 'EdDSA')) as PublicKey);
      expect(await forgetGeneratedKey(t.database)).toBeUndefined();
    } finally {
      await configured.app.close();
      await t.close();
    }
  });

  it('a configured key, once withdrawn, stops the start naming the variable; an earlier generated key withdrawn stays out', async () => {
    const t = await createTestApp();
    const seed = newSeed();
    const configured = await createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: seed } });
    try {
      const [own, generated] = await kids(configured);
      expect(generated).toBe((await kids(t))[0]);
      // Withdrawing the generated key while a configured one signs: a restart with that
      // configured key used to publish the generated key again.
      await withdrawReceiptKey(t.database, generated!);
      await configured.app.close();
      const again = await createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: seed } });
      expect(await kids(again)).toEqual([own]);
      await again.app.close();

      expect(await withdrawReceiptKey(t.database, own!)).toEqual({ kid: own, generatedKeyDeleted: false });
      await expect(createTestApp({ database: t.database, clock: t.clock, config: { receiptSigningKey: seed } })).rejects.toThrow(
        /^RECEIPT_SIGNING_KEY: key .* was withdrawn/,
      );
      expect(await withdrawReceiptKey(t.database, 'no-such-kid')).toBeUndefined();
    } finally {
      await configured.app.close();
      await t.close();
    }
  });
});
