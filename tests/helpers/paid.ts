import { x402Client, wrapFetchWithPayment } from '@x402/fetch';
import { toClientEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { createPublicClient, http, parseAbi, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { Config } from '../../src/config.js';
import { baseDevnetChain, startDevnet, USDC_ADDRESS, type Devnet } from '../../src/devnet/index.js';
import { createTestApp, type TestApp, type TestAppOptions } from './app.js';

export interface PaidStack {
  devnet: Devnet;
  t: TestApp;
  /** http://127.0.0.1:port of the listening service */
  url: string;
  payTo: Hex;
  balanceOf(address: string): Promise<bigint>;
  /** fetch that pays with the official x402 client, from devnet account `index` */
  payingFetch(index: number): typeof fetch;
  close(): Promise<void>;
}

/** The service listening on loopback, paid through the devnet's facilitator into account 5. */
export async function startPaidStack(opts: TestAppOptions & { devnet?: Devnet } = {}): Promise<PaidStack> {
  const devnet = opts.devnet ?? (await startDevnet());
  const payTo = devnet.accounts[5]!.address as Hex;
  const config: Partial<Config> = {
    rpcUrls: [devnet.rpcUrl],
    facilitatorUrl: devnet.facilitatorUrl,
    payTo,
    facilitatorTimeoutMs: 3000,
    ...opts.config,
  };
  const t = await createTestApp({ ...opts, config });
  const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
  const pub = createPublicClient({ chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  const erc20 = parseAbi(['function balanceOf(address) view returns (uint256)']);
  return {
    devnet,
    t,
    url,
    payTo,
    balanceOf: (address) => pub.readContract({ address: USDC_ADDRESS, abi: erc20, functionName: 'balanceOf', args: [address as Hex] }),
    payingFetch(index) {
      const account = privateKeyToAccount(devnet.accounts[index]!.privateKey);
      const client = new x402Client().register('eip155:8453', new ExactEvmScheme(toClientEvmSigner(account, pub)));
      return wrapFetchWithPayment(fetch, client);
    },
    async close() {
      await t.close();
      if (!opts.devnet) await devnet.stop();
    },
  };
}
