import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import type { Database } from './db/database.js';
import { digestOf, sha256Hex } from './canonical.js';
import { newId } from './ids.js';
import { signingWorker } from './signing-worker.js';
import { writeTransaction, type Tx } from './db/tx.js';

export interface Receipt {
  receiptId: string;
  kind: string;
  subjectId: string;
  /** `sha256:<hex>` over the RFC 8785 canonical JSON of the subject */
  digest: string;
  issuedAt: string;
  keyId: string;
  alg: 'EdDSA';
  /** base64url Ed25519 signature over the 32 raw bytes of the digest */
  signature: string;
}

export type UnsignedReceipt = Omit<Receipt, 'signature'>;

export interface Jwk {
  kty: 'OKP';
  crv: 'Ed25519';
  x: string;
  kid: string;
  alg: 'EdDSA';
  use: 'sig';
}

const KV_KEY = 'receipt_signing_key';

/**
 * Signs receipts with one Ed25519 key. Anyone can verify a receipt offline with the public key
 * from /.well-known/jwks.json: recompute the canonical digest of the subject, then check the
 * signature over its 32 bytes.
 */
export class ReceiptSigner {
  private constructor(
    private readonly privateKey: KeyObject,
    readonly jwk: Jwk,
  ) {}

  /**
   * The configured key, or the one kept in the database (generated on first start). A withdrawn
   * key (see withdrawReceiptKey) is never published again, and a configured one stops the start:
   * receipts it signs would not verify.
   */
  static async load(database: Database, configured?: string): Promise<ReceiptSigner> {
    if (!configured) {
      const signer = await ReceiptSigner.generated(database);
      await signer.publish(database.db);
      return signer;
    }
    const signer = ReceiptSigner.fromPrivateKey(parsePrivateKey(configured));
    if (await isWithdrawn(database, signer.jwk.kid)) {
      throw new Error(`RECEIPT_SIGNING_KEY: key ${signer.jwk.kid} was withdrawn (paywarden receipt-key withdraw); configure a new one`);
    }
    await signer.publish(database.db);
    // A key generated before RECEIPT_SIGNING_KEY was set signed receipts too: publish it as well.
    // One that cannot be read cannot be published; it must not stop a start that does not need it.
    const earlier = await generatedKey(database.db).catch((err: unknown) => {
      if (err instanceof UnreadableGeneratedKey) return undefined;
      throw err;
    });
    if (earlier && !(await isWithdrawn(database, earlier.signer.jwk.kid))) await earlier.signer.publish(database.db);
    return signer;
  }

  /**
   * The key kept in the database, generated when there is none. One withdrawn while this start
   * read it (the CLI beside a starting instance) is replaced by a new one, as the next start
   * would do.
   */
  private static async generated(database: Database): Promise<ReceiptSigner> {
    for (let attempt = 0; attempt < 3; attempt++) {
      if (!(await generatedKey(database.db))) {
        const { privateKey } = generateKeyPairSync('ed25519');
        const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
        // Two instances starting together may both generate one: the first insert wins and both
        // then read the same key back.
        await database.db
          .insertInto('kv')
          .values({ key: KV_KEY, value: pem, created_at: new Date().toISOString() })
          .onConflict((oc) => oc.column('key').doNothing())
          .execute();
      }
      const kept = await generatedKey(database.db);
      if (!kept) continue; // withdrawn (and deleted) since it was inserted
      if (!(await isWithdrawn(database, kept.signer.jwk.kid))) return kept.signer;
      await database.db.deleteFrom('kv').where('key', '=', KV_KEY).where('value', '=', kept.pem).execute();
    }
    throw new Error('the generated receipt signing key was withdrawn again and again while the service started; start it again');
  }

  static fromPrivateKey(privateKey: KeyObject): ReceiptSigner {
    const pub = createPublicKey(privateKey).export({ format: 'jwk' }) as { x: string; crv: string };
    if (pub.crv !== 'Ed25519') throw new Error('RECEIPT_SIGNING_KEY must be an Ed25519 key');
    // RFC 7638 thumbprint: members in lexicographic order, no white space.
    const kid = Buffer.from(sha256Hex(`{"crv":"Ed25519","kty":"OKP","x":"${pub.x}"}`), 'hex').toString('base64url');
    return new ReceiptSigner(privateKey, { kty: 'OKP', crv: 'Ed25519', x: pub.x, kid, alg: 'EdDSA', use: 'sig' });
  }

  sign(kind: string, subjectId: string, subject: unknown, issuedAt: Date): Receipt {
    return this.complete(this.prepare(kind, subjectId, subject, issuedAt));
  }

  /**
   * A receipt without its signature yet: every field is fixed here, and the signature follows
   * from them alone (Ed25519 is deterministic), so it can be added later, on the event loop
   * (`complete`) or off it (`completeAll`), and always comes out the same.
   */
  prepare(kind: string, subjectId: string, subject: unknown, issuedAt: Date): UnsignedReceipt {
    return {
      receiptId: newId('rcpt'),
      kind,
      subjectId,
      digest: digestOf(subject),
      issuedAt: issuedAt.toISOString(),
      keyId: this.jwk.kid,
      alg: 'EdDSA',
    };
  }

  /** True when this signer's key can sign `receipt` (it names this key). */
  canComplete(receipt: UnsignedReceipt): boolean {
    return receipt.keyId === this.jwk.kid;
  }

  /**
   * A signed receipt as this key signs it: unchanged when it names this key; else the same
   * receipt (id, time of issue, anything beside it such as a subject) under this key's id and
   * signature, which covers the digest alone. For a receipt whose key was replaced or withdrawn.
   */
  current<R extends Receipt>(receipt: R): R {
    return this.canComplete(receipt) ? receipt : (this.complete({ ...receipt, keyId: this.jwk.kid }) as R);
  }

  /** Signs a prepared receipt on the event loop. */
  complete(unsigned: UnsignedReceipt): Receipt {
    return withSignature(unsigned, sign(null, this.signable(unsigned), this.privateKey));
  }

  /** Signs prepared receipts on a worker thread (see signingWorker). */
  async completeAll(unsigned: UnsignedReceipt[]): Promise<Receipt[]> {
    const sigs = await signingWorker.signAll(this.privateKey, unsigned.map((u) => this.signable(u)));
    return unsigned.map((u, i) => withSignature(u, sigs[i]!));
  }

  /** What is signed for a prepared receipt: its digest, once the receipt is known to name this key. */
  private signable(unsigned: UnsignedReceipt): Buffer {
    if (!this.canComplete(unsigned)) throw new Error(`receipt ${unsigned.receiptId} names another signing key`);
    return digestBytes(unsigned.digest);
  }

  /**
   * Records this key's public half among the published keys. Receipts live on inside evidence
   * chains, whose hashed events cannot be signed again: once RECEIPT_SIGNING_KEY changes, the
   * JWKS must still hold the key that signed them, or no audit of those chains can pass.
   */
  async publish(db: Tx): Promise<void> {
    await db
      .insertInto('kv')
      .values({ key: `${PUBLISHED_PREFIX}${this.jwk.kid}`, value: JSON.stringify(this.jwk), created_at: new Date().toISOString() })
      .onConflict((oc) => oc.column('key').doNothing())
      .execute();
  }

  /**
   * The JWKS: this signer's key first, then every other key the service has published (another
   * instance's during a rolling key change, retired ones), newest first. A withdrawn key is left
   * out, this signer's own too: an instance started before its key was withdrawn signs receipts
   * that no longer verify until it restarts with another key.
   */
  async publishedJwks(database: Database): Promise<{ keys: Jwk[] }> {
    // The published rows alone, never the row of the private key. By their prefix, compared as
    // it is: not as a range of keys, which holds only in byte order (a PostgreSQL database with
    // a linguistic collation, en_US.UTF-8 or ICU, skips punctuation and found no key at all).
    const rows = await database.db
      .selectFrom('kv')
      .select(['key', 'value'])
      .where((eb) =>
        eb.or([PUBLISHED_PREFIX, WITHDRAWN_PREFIX].map((prefix) => eb(eb.fn('substr', ['key', eb.lit(1), eb.lit(prefix.length)]), '=', prefix))),
      )
      .orderBy('created_at', 'desc')
      .execute();
    const withdrawn = new Set(rows.filter((r) => r.key.startsWith(WITHDRAWN_PREFIX)).map((r) => r.key.slice(WITHDRAWN_PREFIX.length)));
    const others = rows
      .filter((r) => r.key.startsWith(PUBLISHED_PREFIX) && r.key !== `${PUBLISHED_PREFIX}${this.jwk.kid}`)
      .map((r) => JSON.parse(r.value) as Jwk);
    return { keys: [this.jwk, ...others].filter((k) => !withdrawn.has(k.kid)) };
  }

  /** A JWKS of this signer's key alone. */
  jwks(): { keys: Jwk[] } {
    return { keys: [this.jwk] };
  }
}

const PUBLISHED_PREFIX = 'receipt_public_key:';
const WITHDRAWN_PREFIX = 'receipt_withdrawn_key:';

/** The key the service generated and keeps in the database, if any. */
async function generatedKey(db: Tx): Promise<{ pem: string; signer: ReceiptSigner } | undefined> {
  const row = await db.selectFrom('kv').select('value').where('key', '=', KV_KEY).executeTakeFirst();
  if (!row) return undefined;
  try {
    return { pem: row.value, signer: ReceiptSigner.fromPrivateKey(createPrivateKey(row.value)) };
  } catch (err) {
    throw new UnreadableGeneratedKey(err);
  }
}

/** The generated key's row holds no Ed25519 private key (edited or damaged): said with the row, never its content. */
export class UnreadableGeneratedKey extends Error {
  constructor(cause: unknown) {
    super(
      `the receipt signing key kept in the database (table kv, key ${KV_KEY}) cannot be read (${cause instanceof Error ? cause.message : String(cause)}): restore the database from a backup, or set RECEIPT_SIGNING_KEY (receipts of the unreadable key then stop verifying)`,
    );
  }
}

const isWithdrawn = async (database: Database, kid: string) =>
  (await database.db.selectFrom('kv').select('key').where('key', '=', `${WITHDRAWN_PREFIX}${kid}`).executeTakeFirst()) !== undefined;

/**
 * Deletes the private key the service generated (before RECEIPT_SIGNING_KEY was set), keeping
 * its public key published: receipts it signed still verify, and the database (and its backups)
 * no longer holds a key that can sign. Only once every instance runs with RECEIPT_SIGNING_KEY:
 * one without it would generate a new key. The kid deleted, or undefined when there is none.
 */
export async function forgetGeneratedKey(database: Database): Promise<string | undefined> {
  return writeTransaction(database, async (trx) => {
    const generated = await generatedKey(trx);
    if (!generated) return undefined;
    // Published before it goes: the receipts it signed must stay verifiable (the JWKS still
    // leaves it out if it was withdrawn).
    await generated.signer.publish(trx);
    await trx.deleteFrom('kv').where('key', '=', KV_KEY).execute();
    return generated.signer.jwk.kid;
  });
}

export interface Withdrawal {
  kid: string;
  /** It was the key the service generated and kept in the database, now deleted: the next start generates another. */
  generatedKeyDeleted: boolean;
}

/**
 * Withdraws a receipt key that leaked: the JWKS stops listing it at once and no start publishes
 * it again (a marker row stays), the generated private key is deleted if it is that one, and a
 * RECEIPT_SIGNING_KEY naming it stops the start. Receipts it signed stop verifying. Running
 * instances keep signing with it until they restart. Undefined when no key has that kid.
 */
export async function withdrawReceiptKey(database: Database, kid: string): Promise<Withdrawal | undefined> {
  return writeTransaction(database, async (trx) => {
    const published = await trx.selectFrom('kv').select('key').where('key', '=', `${PUBLISHED_PREFIX}${kid}`).executeTakeFirst();
    const generatedKeyDeleted = (await generatedKey(trx))?.signer.jwk.kid === kid;
    if (!published && !generatedKeyDeleted) return undefined;
    await trx
      .insertInto('kv')
      .values({ key: `${WITHDRAWN_PREFIX}${kid}`, value: new Date().toISOString(), created_at: new Date().toISOString() })
      .onConflict((oc) => oc.column('key').doNothing())
      .execute();
    await trx.deleteFrom('kv').where('key', '=', `${PUBLISHED_PREFIX}${kid}`).execute();
    if (generatedKeyDeleted) await trx.deleteFrom('kv').where('key', '=', KV_KEY).execute();
    return { kid, generatedKeyDeleted };
  });
}

const digestBytes = (digest: string) => Buffer.from(digest.slice('sha256:'.length), 'hex');

const withSignature = (unsigned: UnsignedReceipt, signature: Buffer): Receipt => ({ ...unsigned, signature: signature.toString('base64url') });

function parsePrivateKey(text: string): KeyObject {
  if (text.includes('BEGIN')) {
    try {
      return createPrivateKey(text);
    } catch {
      throw new Error('RECEIPT_SIGNING_KEY: the PEM is not a private key (expected an Ed25519 PKCS#8 PEM or a base64url 32-byte seed)');
    }
  }
  // A bare base64url 32-byte seed: wrap it in the fixed PKCS#8 prefix for Ed25519.
  const seed = Buffer.from(text, 'base64url');
  if (seed.length !== 32) throw new Error('RECEIPT_SIGNING_KEY: expected a PKCS#8 PEM or a base64url 32-byte seed');
  const prefix = Buffer.from('302e020100300506032b657004220420', 'hex');
  return createPrivateKey({ key: Buffer.concat([prefix, seed]), format: 'der', type: 'pkcs8' });
}
