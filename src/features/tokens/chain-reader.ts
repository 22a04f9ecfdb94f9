import { erc20Abi, getAddress, type Address, type Hex } from 'viem';
import { readOnBase, type ChainClient } from '../../platform/chain.js';
import { tokenDecimals, tokenText } from '../../platform/token-metadata.js';
import { delegatesToUnknownCode, scanCode } from '../token-risk/bytecode.js';
import { BASE_UNISWAP_V2, type DexConfig } from '../token-risk/dex.js';
import { choosePool, farPoolReads, poolCandidates, poolReads, wethPriceUsdc, withFarPools, type PoolChoice } from '../token-risk/pools.js';
import { aggregateNamed } from '../token-risk/rpc.js';

/**
 * The few cheap Base reads the free token tools make. Every method throws an AppError
 * (upstream_unavailable) when Base cannot be read, or when the RPC does not say it serves Base
 * (eth_chainId, asked with the first read of a client); callers decide whether that matters.
 */
export interface TokenChainReader {
  /** name(), symbol(), decimals() in ONE eth_call (Multicall3); a call that reverts or decodes badly is null. */
  identity(address: string): Promise<{ name: string | null; symbol: string | null; decimals: number | null }>;
  /** eth_getCode plus the EIP-1967 and ZeppelinOS implementation slots: three reads, in parallel. */
  contract(address: string): Promise<ContractFacts>;
  /**
   * The Uniswap v2 pool the paid token-risk report would simulate through, by the report's own
   * discovery and depth rule (token-risk/pools.ts): one Multicall3 eth_call (a second only for
   * a pair at an unexpected address, which the canonical Base factory never returns).
   */
  pool(address: string): Promise<PoolChoice>;
}

export interface ContractFacts {
  codeSize: number;
  /** EIP-1167 minimal proxy target, read from the bytecode itself. */
  cloneTarget: string | null;
  /** EIP-7702 delegation designator (0xef0100 ‖ address): an account, not a contract. */
  delegatedTo: string | null;
  /** Non-zero EIP-1967 implementation slot. */
  eip1967Implementation: string | null;
  /** Non-zero ZeppelinOS (org.zeppelinos.proxy.implementation) slot, as used by Base USDC's proxy. */
  zosImplementation: string | null;
  /** The contract runs code kept elsewhere (token-risk/bytecode.ts delegatesToUnknownCode, the paid report's rule). */
  delegatecall: boolean;
}

/** bytes32(uint256(keccak256('eip1967.proxy.implementation')) - 1) */
export const EIP1967_IMPLEMENTATION_SLOT = '0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc' as const;
/** keccak256('org.zeppelinos.proxy.implementation') */
export const ZOS_IMPLEMENTATION_SLOT = '0x7050c9e0f4ca769c69bd3a8ef740bc37934f8e2c036e5a723fd8ee048ed3f8c3' as const;

const CLONE = /^0x363d3d373d3d3d363d73([0-9a-f]{40})5af43d82803e903d91602b57fd5bf3$/;
const DELEGATION = /^0xef0100([0-9a-f]{40})$/;

function slotAddress(word: Hex | undefined): string | null {
  if (!word || /^0x0*$/.test(word)) return null;
  const hex = word.slice(2).padStart(64, '0');
  if (!/^0{24}/.test(hex)) return null; // not an address-shaped word
  const addr = `0x${hex.slice(24)}`;
  return /^0x0{40}$/.test(addr) ? null : getAddress(addr);
}

export function contractFacts(code: Hex | undefined, implSlot: Hex | undefined, zosSlot: Hex | undefined): ContractFacts {
  const c = (code ?? '0x').toLowerCase() as Hex;
  const clone = CLONE.exec(c);
  const delegation = DELEGATION.exec(c);
  return {
    codeSize: (c.length - 2) / 2,
    cloneTarget: clone ? getAddress(`0x${clone[1]}`) : null,
    delegatedTo: delegation ? getAddress(`0x${delegation[1]}`) : null,
    eip1967Implementation: slotAddress(implSlot),
    zosImplementation: slotAddress(zosSlot),
    delegatecall: c.length > 2 && !delegation && delegatesToUnknownCode(scanCode(c)),
  };
}

/** The TokenChainReader of the configured Base RPC (viem, with its fallback transport). */
export function viemTokenChainReader(chain: ChainClient, dex: DexConfig = BASE_UNISWAP_V2): TokenChainReader {
  return {
    async pool(address) {
      const token = getAddress(address.toLowerCase()) as Address;
      return readOnBase(chain, async () => {
        const r = await aggregateNamed(chain, poolReads(dex, token));
        let candidates = poolCandidates(dex, token, r);
        const far = farPoolReads(token, candidates);
        if (Object.keys(far).length) candidates = withFarPools(token, candidates, await aggregateNamed(chain, far));
        return choosePool(candidates, wethPriceUsdc(dex, r));
      });
    },
    async identity(address) {
      const token = getAddress(address.toLowerCase()) as Address;
      const results = await readOnBase(chain, () =>
        chain.multicall({
          allowFailure: true,
          contracts: [
            { address: token, abi: erc20Abi, functionName: 'name' },
            { address: token, abi: erc20Abi, functionName: 'symbol' },
            { address: token, abi: erc20Abi, functionName: 'decimals' },
          ],
        }),
      );
      const [name, symbol, decimals] = results;
      const text = (r: typeof name | typeof symbol) => (r.status === 'success' && typeof r.result === 'string' ? tokenText(r.result) : null);
      return {
        name: text(name),
        symbol: text(symbol),
        decimals: decimals.status === 'success' ? tokenDecimals(decimals.result) : null,
      };
    },
    async contract(address) {
      const target = getAddress(address.toLowerCase()) as Address;
      const [code, impl, zos] = await readOnBase(chain, () =>
        Promise.all([
          chain.getCode({ address: target }),
          chain.getStorageAt({ address: target, slot: EIP1967_IMPLEMENTATION_SLOT }),
          chain.getStorageAt({ address: target, slot: ZOS_IMPLEMENTATION_SLOT }),
        ]),
      );
      return contractFacts(code, impl, zos);
    },
  };
}
