// Contracts the preflight tests run real transactions against: test contracts compiled from
// preflight-fixtures.sol with solc-js (cached under node_modules/.cache, keyed by source and
// compiler), Uniswap v2 from the npm artifacts with its router at the canonical Base address,
// WETH9 at Base's WETH predeploy, and a Permit2 stand-in at Permit2's address.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getAddress, maxUint256, parseEther, type Abi, type Address, type Hex } from 'viem';
import { devnetAdmin } from './accounts.js';
import { devnetClients } from './chain.js';
import { USDC_ADDRESS, fiatTokenAbi } from './usdc.js';

export const PERMIT2: Address = '0x000000000022D473030F116dDEE9F6B43aC78BA3';
export const WETH: Address = '0x4200000000000000000000000000000000000006';
export const UNISWAP_V2_ROUTER: Address = '0x4752ba5DBc23f44D87826276BF6Fd6b1C372aD24';

const here = dirname(fileURLToPath(import.meta.url));
const requireHere = createRequire(import.meta.url);
const CONTRACTS = ['PreflightToken', 'RejectsEth', 'Reverter', 'Delegator', 'SweepLib', 'ForwardingProxy', 'Drainer', 'PreflightNft', 'Permit2Stub'] as const;
type Name = (typeof CONTRACTS)[number];
export type Compiled = Record<Name, { abi: Abi; bytecode: Hex; deployedBytecode: Hex }>;

/** Compiles preflight-fixtures.sol once per source and compiler version; later runs read the cache. */
export function compilePreflightContracts(): Compiled {
  const source = readFileSync(join(here, 'preflight-fixtures.sol'), 'utf8');
  const solc = requireHere('solc') as { version(): string; compile(input: string): string };
  const key = createHash('sha256').update(solc.version()).update(source).digest('hex').slice(0, 16);
  const dir = join(dirname(requireHere.resolve('solc/package.json')), '..', '.cache', 'paywarden-preflight');
  const file = join(dir, `${key}.json`);
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8')) as Compiled;
  const input = {
    language: 'Solidity',
    sources: { 'preflight-fixtures.sol': { content: source } },
    settings: { optimizer: { enabled: true, runs: 200 }, evmVersion: 'cancun', outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } } },
  };
  const out = JSON.parse(solc.compile(JSON.stringify(input))) as {
    errors?: { severity: string; formattedMessage: string }[];
    contracts: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string }; deployedBytecode: { object: string } } }>>;
  };
  const errors = (out.errors ?? []).filter((e) => e.severity === 'error');
  if (errors.length) throw new Error(`solc: ${errors.map((e) => e.formattedMessage).join('\n')}`);
  const compiled = {} as Compiled;
  for (const name of CONTRACTS) {
    const c = out.contracts['preflight-fixtures.sol']?.[name];
    if (!c) throw new Error(`solc produced no ${name}`);
    compiled[name] = { abi: c.abi, bytecode: `0x${c.evm.bytecode.object}`, deployedBytecode: `0x${c.evm.deployedBytecode.object}` };
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(file, JSON.stringify(compiled));
  return compiled;
}

function uniswapArtifact(pkg: 'v2-core' | 'v2-periphery', name: string): { abi: Abi; bytecode: Hex } {
  const j = JSON.parse(readFileSync(requireHere.resolve(`@uniswap/${pkg}/build/${name}.json`), 'utf8')) as { abi: Abi; bytecode: string };
  return { abi: j.abi, bytecode: (j.bytecode.startsWith('0x') ? j.bytecode : `0x${j.bytecode}`) as Hex };
}

export interface PreflightFixtures {
  compiled: Compiled;
  token: Address;
  rejectsEth: Address;
  reverter: Address;
  delegator: Address;
  sweepLib: Address;
  proxy: Address;
  drainer: Address;
  /** Receives whatever the drainer pulls. */
  collector: Address;
  nft: Address;
  permit2: Address;
  factory: Address;
  router: Address;
  weth: Address;
  /** USDC/PFT and USDC/WETH pairs. */
  pairs: { usdcToken: Address; usdcWeth: Address };
}

export async function deployPreflightFixtures(rpcUrl: string): Promise<PreflightFixtures> {
  const compiled = compilePreflightContracts();
  const admin = devnetAdmin();
  const { pub, test, walletOf, mined } = devnetClients(rpcUrl, 'fixture');
  const wallet = walletOf(admin);
  const deploy = async (c: { abi: Abi; bytecode: Hex }, args: unknown[] = []): Promise<Address> => {
    const r = await mined(await wallet.deployContract({ abi: c.abi, bytecode: c.bytecode, args }));
    if (!r.contractAddress) throw new Error('no contract address');
    return getAddress(r.contractAddress);
  };
  const write = async (address: Address, abi: Abi, functionName: string, args: unknown[], value?: bigint) =>
    mined(await wallet.writeContract({ address, abi, functionName, args, ...(value ? { value } : {}) } as Parameters<typeof wallet.writeContract>[0]));
  /** Code (and the given storage slots) of a normal deployment, copied to a canonical address. */
  const place = async (from: Address, at: Address, slots: bigint[] = []) => {
    await test.setCode({ address: at, bytecode: (await pub.getCode({ address: from }))! });
    for (const s of slots) {
      const slot = `0x${s.toString(16).padStart(64, '0')}` as Hex;
      await test.setStorageAt({ address: at, index: slot, value: (await pub.getStorageAt({ address: from, slot }))! });
    }
  };
  await test.setBalance({ address: admin.address, value: parseEther('1000') });

  const c = compiled;
  const token = await deploy(c.PreflightToken, ['Preflight Token', 'PFT', parseEther('1000000')]);
  const rejectsEth = await deploy(c.RejectsEth);
  const reverter = await deploy(c.Reverter);
  const delegator = await deploy(c.Delegator);
  const sweepLib = await deploy(c.SweepLib);
  const proxy = await deploy(c.ForwardingProxy, [token]);
  const collector = '0x000000000000000000000000000000000000c011' as Address;
  const drainer = await deploy(c.Drainer, [collector]);
  const nft = await deploy(c.PreflightNft);
  await place(await deploy(c.Permit2Stub), PERMIT2);

  // WETH9 keeps name, symbol and decimals in slots 0..2; the router's WETH immutable is Base's.
  await place(await deploy(uniswapArtifact('v2-periphery', 'WETH9')), WETH, [0n, 1n, 2n]);
  const factory = await deploy(uniswapArtifact('v2-core', 'UniswapV2Factory'), [admin.address]);
  const routerArt = uniswapArtifact('v2-periphery', 'UniswapV2Router02');
  await place(await deploy(routerArt, [factory, WETH]), UNISWAP_V2_ROUTER);

  // The admin mints itself pool USDC (deployUsdc used up its minter allowance) and seeds
  // USDC/PFT at 1:1 and USDC/WETH at 2,500 USDC per ETH.
  const usdcPool = 200_000n * 10n ** 6n;
  await write(USDC_ADDRESS, fiatTokenAbi, 'configureMinter', [admin.address, usdcPool]);
  await write(USDC_ADDRESS, fiatTokenAbi, 'mint', [admin.address, usdcPool]);
  const erc20 = c.PreflightToken.abi;
  await write(USDC_ADDRESS, erc20, 'approve', [UNISWAP_V2_ROUTER, maxUint256]);
  await write(token, erc20, 'approve', [UNISWAP_V2_ROUTER, maxUint256]);
  const deadline = 2n ** 40n;
  await write(UNISWAP_V2_ROUTER, routerArt.abi, 'addLiquidity', [USDC_ADDRESS, token, 100_000n * 10n ** 6n, parseEther('100000'), 0n, 0n, admin.address, deadline]);
  await write(UNISWAP_V2_ROUTER, routerArt.abi, 'addLiquidityETH', [USDC_ADDRESS, 100_000n * 10n ** 6n, 0n, 0n, admin.address, deadline], parseEther('40'));
  const factoryAbi = uniswapArtifact('v2-core', 'UniswapV2Factory').abi;
  const pair = (a: Address, b: Address) => pub.readContract({ address: factory, abi: factoryAbi, functionName: 'getPair', args: [a, b] }) as Promise<Address>;

  return {
    compiled,
    token,
    rejectsEth,
    reverter,
    delegator,
    sweepLib,
    proxy,
    drainer,
    collector,
    nft,
    permit2: PERMIT2,
    factory,
    router: UNISWAP_V2_ROUTER,
    weth: WETH,
    pairs: { usdcToken: await pair(USDC_ADDRESS, token), usdcWeth: await pair(USDC_ADDRESS, WETH) },
  };
}
