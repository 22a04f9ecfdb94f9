import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChain, type ChainHandle } from '../../src/devnet/chain.js';
import { createChainClient, readOnBase, upstream } from '../../src/platform/chain.js';
import { AppError } from '../../src/platform/errors.js';

/**
 * BASE_RPC_URLS lists fallbacks. Each URL must prove it serves Base before it answers anything:
 * a check made once per client vouched only for the first, and when that one failed the
 * fallback read from a testnet URL listed after it (a transfer there was recorded as a MATCH).
 */
describe('several RPC URLs: every one of them must serve Base', () => {
  let base: ChainHandle;
  let testnet: ChainHandle;
  let deadUrl: string;
  beforeAll(async () => {
    [base, testnet] = await Promise.all([startChain(), startChain({ chainId: 84532 })]);
    // Distinguishable block heights: the testnet is 40 blocks ahead.
    await fetch(testnet.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'anvil_mine', params: ['0x28'] }) });
    const gone = await startChain();
    deadUrl = gone.rpcUrl;
    await gone.stop();
  });
  afterAll(async () => {
    await Promise.all([base?.stop(), testnet?.stop()]);
  });

  const client = (urls: string[]) => createChainClient({ rpcUrls: urls, rpcTimeoutMs: 2_000 });

  it('a Base URL that stops answering is not replaced by a testnet URL after it: 502', async () => {
    const spare = await startChain();
    const chain = client([spare.rpcUrl, testnet.rpcUrl]);
    expect(await readOnBase(chain, () => chain.getBlockNumber({ cacheTime: 0 }))).toBe(0n); // the Base URL, checked
    await spare.stop();
    const err = await upstream(() => chain.getBlockNumber({ cacheTime: 0 })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).status).toBe(502);
    expect(String(((err as AppError).cause as Error).message)).toMatch(/chain id 84532|WrongChain/);
  });

  it('a testnet URL listed first is passed over for the Base URL after it', async () => {
    const chain = client([testnet.rpcUrl, base.rpcUrl]);
    expect(await upstream(() => chain.getBlockNumber({ cacheTime: 0 }))).toBe(0n); // not the testnet's 40
  });

  it('a URL that was down is asked for its chain again once it answers', async () => {
    const chain = client([deadUrl, base.rpcUrl]);
    expect(await upstream(() => chain.getBlockNumber({ cacheTime: 0 }))).toBe(0n);
  });

  it('only testnet URLs: every read is a 502, never an answer', async () => {
    const chain = client([testnet.rpcUrl]);
    for (let i = 0; i < 2; i++) {
      const err = await upstream(() => chain.getBlockNumber({ cacheTime: 0 })).catch((e: unknown) => e);
      expect((err as AppError).status).toBe(502);
    }
  });
});
