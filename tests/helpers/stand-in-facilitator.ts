import Fastify from 'fastify';
import { ADDR } from './app.js';

/**
 * A stand-in x402 facilitator on loopback, for tests that need the paid reports' 402 challenge
 * without a chain: it says what it supports (so that the challenge can be built) and refuses every
 * payment it is asked to verify. Nothing is ever settled. `verifies` counts the verify calls.
 */
export async function standInFacilitator(): Promise<{ url: string; verifies: () => number; close(): Promise<void> }> {
  const f = Fastify();
  let verifies = 0;
  f.get('/supported', async () => ({ kinds: [{ x402Version: 2, scheme: 'exact', network: 'eip155:8453' }], extensions: [], signers: {} }));
  f.post('/verify', async () => {
    verifies++;
    return { isValid: false, invalidReason: 'invalid_exact_evm_payload_signature', payer: ADDR.alice };
  });
  f.post('/settle', async (_request, reply) => reply.status(500).send({ error: 'the stand-in facilitator never settles' }));
  const url = await f.listen({ host: '127.0.0.1', port: 0 });
  return { url, verifies: () => verifies, close: () => f.close() };
}
