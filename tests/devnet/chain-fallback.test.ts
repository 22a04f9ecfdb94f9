import { createServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChain, type ChainHandle } from '../../src/devnet/chain.js';
import { createChainClient, readOnBase, upstream } from '../../src/platform/chain.js';
import { AppError } from '../../src/platform/errors.js';
import { quickCheck } from '../../src/features/reports/quick-check.js';
import { jsonRpc } from '../helpers/http.js';

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
    await jsonRpc(testnet.rpcUrl, 'anvil_mine', ['0x28']);
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

  it('a URL is asked for its chain once, with its first read, not before every read', async () => {
    const methods: string[] = [];
    const proxy = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const m = JSON.parse(body) as { method: string } | Array<{ method: string }>;
        methods.push(...(Array.isArray(m) ? m.map((x) => x.method) : [m.method]));
        void fetch(base.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
          .then((up) => up.text())
          .then((text) => res.writeHead(200, { 'content-type': 'application/json' }).end(text));
      });
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
    try {
      const chain = client([`http://127.0.0.1:${(proxy.address() as { port: number }).port}`]);
      await upstream(() => chain.getBlockNumber({ cacheTime: 0 }));
      expect(methods.sort()).toEqual(['eth_blockNumber', 'eth_chainId']);
      methods.length = 0;
      for (let i = 0; i < 5; i++) await upstream(() => chain.getBlockNumber({ cacheTime: 0 }));
      expect(methods).toEqual(Array(5).fill('eth_blockNumber'));
    } finally {
      proxy.close();
    }
  });

  it('the quick check, whose report is the chain id found, still reads a testnet URL (FAIL, 84532)', async () => {
    const anyChain = createChainClient({ rpcUrls: [testnet.rpcUrl, base.rpcUrl], rpcTimeoutMs: 2_000 }, { anyChain: true });
    const report = await quickCheck(anyChain, new Date());
    expect(report).toMatchObject({ status: 'FAIL', checks: { chainId: { observed: 84532, match: false }, usdcContract: { codePresent: false } } });
  });

  it('only testnet URLs: every read is a 502, never an answer', async () => {
    const chain = client([testnet.rpcUrl]);
    for (let i = 0; i < 2; i++) {
      const err = await upstream(() => chain.getBlockNumber({ cacheTime: 0 })).catch((e: unknown) => e);
      expect((err as AppError).status).toBe(502);
    }
  });
});
