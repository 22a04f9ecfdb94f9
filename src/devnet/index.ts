// One call to get a working "Base mainnet in a box": anvil (chain id 8453), real
// USDC at its canonical address, Multicall3, and an x402 facilitator settling on it.
import { anvilAccounts, type DevAccount } from './accounts.js';
import { startChain, type StartChainOptions } from './chain.js';
import { startFacilitator, type FacilitatorFaults, type FacilitatorHandle } from './facilitator.js';
import { deployUsdc, type UsdcDeployment } from './usdc.js';
import { deployZoo, type ZooDeployment } from './zoo/index.js';

export { ANVIL_MNEMONIC, anvilAccounts, devnetAdmin, type DevAccount } from './accounts.js';
export { BASE_CHAIN_ID, baseDevnetChain, devnetClients, freePort, startChain, type ChainHandle, type StartChainOptions } from './chain.js';
export {
  BASE_NETWORK,
  FAULT_REASON,
  startFacilitator,
  type FacilitatorCallCounts,
  type FacilitatorFaults,
  type FacilitatorHandle,
  type StartFacilitatorOptions,
} from './facilitator.js';
export { ZOO_BEHAVIOURS, deployZoo, zooTokenAbi, type ZooBehaviour, type ZooDeployment, type ZooToken } from './zoo/index.js';
export {
  DEFAULT_MINT_AMOUNT,
  MULTICALL3_ADDRESS,
  USDC_ADDRESS,
  USDC_EIP712_DOMAIN,
  deployUsdc,
  fiatTokenAbi,
  type DeployUsdcOptions,
  type UsdcDeployment,
} from './usdc.js';

/** Account index that signs facilitator settlements; tests should not pay from it. */
export const FACILITATOR_ACCOUNT_INDEX = 9;

export interface StartDevnetOptions {
  chain?: StartChainOptions;
  /** Initial facilitator faults; change later with `facilitator.setFaults`. */
  faults?: FacilitatorFaults;
  /** Also deploy the token zoo: Uniswap v2 at its Base addresses and one test token per behaviour (./zoo). */
  zoo?: boolean;
}

export interface Devnet {
  rpcUrl: string;
  facilitatorUrl: string;
  usdcAddress: UsdcDeployment['usdcAddress'];
  multicall3Address: UsdcDeployment['multicall3Address'];
  deployment: UsdcDeployment;
  /** anvil's first ten default accounts, each holding 10,000 ETH and 1,000 USDC. */
  accounts: DevAccount[];
  facilitator: FacilitatorHandle;
  /** Present when started with `{ zoo: true }`. */
  zoo?: ZooDeployment;
  stop(): Promise<void>;
}

export async function startDevnet(opts: StartDevnetOptions = {}): Promise<Devnet> {
  const chain = await startChain(opts.chain);
  let facilitator: FacilitatorHandle | undefined;
  // Idempotent, and tolerant of partial startup, so afterAll hooks can call it blindly.
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      try {
        await facilitator?.stop();
      } finally {
        await chain.stop();
      }
    })());

  try {
    const accounts = anvilAccounts(10);
    const deployment = await deployUsdc(chain.rpcUrl);
    const zoo = opts.zoo ? await deployZoo(chain.rpcUrl) : undefined;
    const signer = accounts[FACILITATOR_ACCOUNT_INDEX];
    if (!signer) throw new Error('facilitator account missing');
    facilitator = await startFacilitator({ rpcUrl: chain.rpcUrl, privateKey: signer.privateKey, faults: opts.faults });
    return {
      rpcUrl: chain.rpcUrl,
      facilitatorUrl: facilitator.url,
      usdcAddress: deployment.usdcAddress,
      multicall3Address: deployment.multicall3Address,
      deployment,
      accounts,
      facilitator,
      ...(zoo ? { zoo } : {}),
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}
