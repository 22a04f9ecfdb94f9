import { createHash, generateKeyPairSync, sign, verify } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { SigningWorker } from '../../src/platform/signing-worker.js';

const digests = (n: number, tag: string) => Array.from({ length: n }, (_, i) => createHash('sha256').update(`${tag}-${i}`).digest());

describe('signatures on the signing worker', () => {
  const worker = new SigningWorker();
  afterEach(() => worker.terminate());

  it('are exactly the signatures made on the event loop, in order, for each key', async () => {
    const a = generateKeyPairSync('ed25519');
    const b = generateKeyPairSync('ed25519');
    const da = digests(40, 'a');
    const db = digests(3, 'b');
    const [sa, sb, none] = await Promise.all([worker.signAll(a.privateKey, da), worker.signAll(b.privateKey, db), worker.signAll(a.privateKey, [])]);
    expect(sa.map((s) => s.toString('hex'))).toEqual(da.map((d) => sign(null, d, a.privateKey).toString('hex')));
    expect(sb.map((s) => s.toString('hex'))).toEqual(db.map((d) => sign(null, d, b.privateKey).toString('hex')));
    expect(none).toEqual([]);
    expect(verify(null, da[7]!, a.publicKey, sa[7]!)).toBe(true);
    expect(verify(null, da[7]!, b.publicKey, sa[7]!)).toBe(false);
  });

  it('a worker that dies leaves nothing unsigned: its work is signed on the event loop, and the next call starts a new one', async () => {
    const k = generateKeyPairSync('ed25519');
    const d = digests(2_000, 'dies');
    const inFlight = worker.signAll(k.privateKey, d);
    await worker.terminate();
    const sigs = await inFlight;
    expect(sigs).toHaveLength(d.length);
    expect(sigs.every((s, i) => verify(null, d[i]!, k.publicKey, s))).toBe(true);
    const after = digests(5, 'after');
    expect((await worker.signAll(k.privateKey, after)).map((s) => s.toString('hex'))).toEqual(after.map((x) => sign(null, x, k.privateKey).toString('hex')));
  });

  it('a key that cannot sign fails its caller instead of hanging, and the worker serves the next one', async () => {
    const wrong = generateKeyPairSync('x25519');
    await expect(worker.signAll(wrong.privateKey, digests(3, 'wrong'))).rejects.toThrow();
    const k = generateKeyPairSync('ed25519');
    const d = digests(2, 'next');
    expect((await worker.signAll(k.privateKey, d)).every((s, i) => verify(null, d[i]!, k.publicKey, s))).toBe(true);
  });
});
