// Uniswap v2 (factory, Router02) and WETH9 from their npm artifacts, placed at their canonical
// Base addresses, so the token-risk report finds pools on the devnet exactly where it looks on
// Base. Runtime code comes from an eth_call of the creation code (no throwaway deployments);
// the few storage slots a constructor would have written are then set explicitly.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import {
  concat,
  encodeAbiParameters,
  pad,
  parseAbi,
  stringToHex,
  toHex,
  type Address,
  type Hex,
  type PublicClient,
  type TestClient,
} from 'viem';
import { BASE_UNISWAP_V2 } from '../../features/token-risk/dex.js';

const requireHere = createRequire(import.meta.url);

function creationCode(pkg: '@uniswap/v2-core' | '@uniswap/v2-periphery', name: string): Hex {
  const file = requireHere.resolve(`${pkg}/build/${name}.json`);
  const artifact = JSON.parse(readFileSync(file, 'utf8')) as { evm: { bytecode: { object: string } } };
  return `0x${artifact.evm.bytecode.object.replace(/^0x/, '')}`;
}

/** A Solidity `string` shorter than 32 bytes, as stored in its slot: data left-aligned, length * 2 last. */
function shortStringSlot(s: string): Hex {
  const data = stringToHex(s);
  const len = (data.length - 2) / 2;
  if (len > 31) throw new Error(`"${s}" is not a short string`);
  return concat([pad(data, { dir: 'right', size: 31 }), toHex(len * 2, { size: 1 })]);
}

const slot = (n: number) => toHex(n, { size: 32 });

export const uniswapAbi = parseAbi([
  'function addLiquidity(address tokenA, address tokenB, uint256 amountADesired, uint256 amountBDesired, uint256 amountAMin, uint256 amountBMin, address to, uint256 deadline) returns (uint256, uint256, uint256)',
  'function addLiquidityETH(address token, uint256 amountTokenDesired, uint256 amountTokenMin, uint256 amountETHMin, address to, uint256 deadline) payable returns (uint256, uint256, uint256)',
  'function getPair(address, address) view returns (address)',
  'function feeToSetter() view returns (address)',
  'function factory() view returns (address)',
  'function WETH() view returns (address)',
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
]);

async function runtimeOf(pub: PublicClient, code: Hex): Promise<Hex> {
  const { data } = await pub.call({ data: code });
  if (!data || data === '0x') throw new Error('creation code returned no runtime code');
  return data;
}

/** Puts WETH9, UniswapV2Factory (fee setter `feeToSetter`) and UniswapV2Router02 at their Base addresses. */
export async function installUniswapV2(pub: PublicClient, test: TestClient, feeToSetter: Address): Promise<void> {
  const { weth, factory, router } = BASE_UNISWAP_V2;

  await test.setCode({ address: weth, bytecode: await runtimeOf(pub, creationCode('@uniswap/v2-periphery', 'WETH9')) });
  // WETH9 keeps name, symbol and decimals in slots 0-2 (written by field initialisers).
  await test.setStorageAt({ address: weth, index: slot(0), value: shortStringSlot('Wrapped Ether') });
  await test.setStorageAt({ address: weth, index: slot(1), value: shortStringSlot('WETH') });
  await test.setStorageAt({ address: weth, index: slot(2), value: toHex(18, { size: 32 }) });

  // Solidity 0.5 has no immutables: the factory's runtime is position independent. Slot 1 is feeToSetter.
  const factoryArgs = encodeAbiParameters([{ type: 'address' }], [feeToSetter]);
  await test.setCode({ address: factory, bytecode: await runtimeOf(pub, concat([creationCode('@uniswap/v2-core', 'UniswapV2Factory'), factoryArgs])) });
  await test.setStorageAt({ address: factory, index: slot(1), value: pad(feeToSetter, { size: 32 }) });

  // The router's factory and WETH are immutables, baked into the runtime by its constructor.
  const routerArgs = encodeAbiParameters([{ type: 'address' }, { type: 'address' }], [factory, weth]);
  await test.setCode({ address: router, bytecode: await runtimeOf(pub, concat([creationCode('@uniswap/v2-periphery', 'UniswapV2Router02'), routerArgs])) });

  const read = <F extends 'name' | 'symbol' | 'decimals' | 'feeToSetter' | 'factory' | 'WETH'>(address: Address, functionName: F) =>
    pub.readContract({ address, abi: uniswapAbi, functionName } as never) as Promise<unknown>;
  const checks: Array<[unknown, unknown, string]> = [
    [await read(weth, 'name'), 'Wrapped Ether', 'WETH name'],
    [await read(weth, 'symbol'), 'WETH', 'WETH symbol'],
    [await read(weth, 'decimals'), 18, 'WETH decimals'],
    [String(await read(factory, 'feeToSetter')).toLowerCase(), feeToSetter.toLowerCase(), 'factory feeToSetter'],
    [await read(router, 'factory'), factory, 'router factory'],
    [await read(router, 'WETH'), weth, 'router WETH'],
  ];
  for (const [got, want, what] of checks) {
    if (got !== want) throw new Error(`Uniswap v2 install: ${what} is ${String(got)}, expected ${String(want)}`);
  }
}
