// Coinbase's hosted facilitator authenticates every call with a JWT signed by the CDP API key.
// A local stand-in facilitator records what the service sends.
import { generateKeyPairSync } from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createTestApp } from '../helpers/app.js';

let facilitator: FastifyInstance;
let url: string;
const seen: Array<string | undefined> = [];

beforeAll(async () => {
  facilitator = Fastify();
  facilitator.get('/supported', async (request) => {
    seen.push(request.headers.authorization);
    return { kinds: [{ x402Version: 2, scheme: 'exact', network: 'eip155:8453' }], extensions: [], signers: {} };
  });
  url = await facilitator.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await facilitator.close();
});

/** A CDP-style Ed25519 secret: base64 of the 32-byte seed followed by the 32-byte public key. */
function cdpSecret(): string {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(-32);
  const pub = publicKey.export({ format: 'der', type: 'spki' }).subarray(-32);
  return Buffer.concat([seed, pub]).toString('base64');
}

async function challengeWith(config: Record<string, unknown>) {
  const t = await createTestApp({ config: { facilitatorUrl: url, payTo: '0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc', ...config } });
  try {
    const res = await t.app.inject({ method: 'GET', url: '/api/quick-check' });
    expect(res.statusCode).toBe(402);
  } finally {
    await t.close();
  }
  return seen.at(-1);
}

describe('facilitator authentication with a CDP API key', () => {
  it('signs every facilitator call with a JWT naming the key when CDP keys are configured', async () => {
    const keyId = 'organizations/test/apiKeys/paywarden';
    const auth = await challengeWith({ cdpApiKeyId: keyId, cdpApiKeySecret: cdpSecret() });
    expect(auth).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
    const header = JSON.parse(Buffer.from(auth!.split(' ')[1]!.split('.')[0]!, 'base64url').toString());
    expect(header).toMatchObject({ alg: 'EdDSA', kid: keyId });
  });

  it('sends no Authorization header without CDP keys', async () => {
    expect(await challengeWith({})).toBeUndefined();
  });

  it('refuses to start with only one of the two CDP variables', () => {
    expect(() => parseConfig({ CDP_API_KEY_ID: 'x' })).toThrow(/CDP_API_KEY_ID and CDP_API_KEY_SECRET/);
  });
});
