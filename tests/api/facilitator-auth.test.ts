// Coinbase's hosted facilitator authenticates every call with a JWT signed by the CDP API key.
// A proxy in front of the devnet's facilitator records what the service sends on each call of a
// real payment: /supported, /verify and /settle.
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { startHttpProxy, startPaidStack, type PaidStack, type ProxiedRequest } from '../helpers/paid.js';

let base: PaidStack;
let proxy: Awaited<ReturnType<typeof startHttpProxy>>;
const seen: ProxiedRequest[] = [];

beforeAll(async () => {
  base = await startPaidStack();
  proxy = await startHttpProxy(base.devnet.facilitatorUrl, async (req, forward) => {
    seen.push(req);
    return forward();
  });
});
afterAll(async () => {
  await proxy?.close();
  await base?.close();
});

/** A CDP-style Ed25519 secret: base64 of the 32-byte seed followed by the 32-byte public key. */
function cdpSecret(): string {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(-32);
  const pub = publicKey.export({ format: 'der', type: 'spki' }).subarray(-32);
  return Buffer.concat([seed, pub]).toString('base64');
}

/** Pays for one quick check through the proxy; the facilitator calls made, by path. */
async function payThroughProxy(config: Record<string, unknown>): Promise<Map<string, Array<string | undefined>>> {
  seen.length = 0;
  const s = await startPaidStack({ devnet: base.devnet, database: base.t.database, config: { facilitatorUrl: proxy.url, ...config } });
  try {
    const res = await s.payingFetch(1)(`${s.url}/api/quick-check`);
    expect(res.status, await res.clone().text()).toBe(200);
  } finally {
    await s.close();
  }
  const byPath = new Map<string, Array<string | undefined>>();
  for (const req of seen) byPath.set(req.url, [...(byPath.get(req.url) ?? []), req.authorization]);
  expect([...byPath.keys()].sort()).toEqual(['/settle', '/supported', '/verify']);
  return byPath;
}

describe('facilitator authentication with a CDP API key', () => {
  it('signs every facilitator call (supported, verify, settle) with a JWT naming the key when CDP keys are configured', async () => {
    const keyId = 'organizations/test/apiKeys/paywarden';
    for (const [path, auths] of await payThroughProxy({ cdpApiKeyId: keyId, cdpApiKeySecret: cdpSecret() })) {
      for (const auth of auths) {
        expect(auth, path).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
        const [header, payload] = auth!.split(' ')[1]!.split('.').slice(0, 2).map((part) => JSON.parse(Buffer.from(part, 'base64url').toString()));
        expect(header, path).toMatchObject({ alg: 'EdDSA', kid: keyId });
        // Each JWT is for the call it goes with (CDP checks the method and path it names).
        expect(JSON.stringify(payload), path).toContain(path);
      }
    }
  });

  it('sends no Authorization header without CDP keys', async () => {
    for (const [path, auths] of await payThroughProxy({})) expect(auths.every((a) => a === undefined), path).toBe(true);
  });

  it('refuses to start with only one of the two CDP variables', () => {
    expect(() => parseConfig({ CDP_API_KEY_ID: 'x' })).toThrow(/CDP_API_KEY_ID and CDP_API_KEY_SECRET/);
  });
});
