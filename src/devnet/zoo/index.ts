// The token zoo: Uniswap v2 at its Base addresses and one test token per behaviour the
// token-risk report must recognise, each with a seeded pool (except `no-liquidity`). Addresses
// are deterministic: the zoo deploys from its own account (index 11 of anvil's mnemonic, outside
// the ten test accounts) in a fixed order, so a fresh devnet always has the same zoo.
import {
  createPublicClient,
  createWalletClient,
  encodeFunctionData,
  getAddress,
  http,
  maxUint256,
  parseAbi,
  parseEther,
  parseUnits,
  type Abi,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import { mnemonicToAccount, type HDAccount } from 'viem/accounts';
import { BASE_UNISWAP_V2, pairAddress } from '../../features/token-risk/dex.js';
import { ANVIL_MNEMONIC, devnetAdmin } from '../accounts.js';
import { baseDevnetChain, devnetClients } from '../chain.js';
import { USDC_ADDRESS, fiatTokenAbi } from '../usdc.js';
import { compileZoo, type ZooArtifacts } from './compile.js';
import { installUniswapV2, uniswapAbi } from './uniswap.js';

export { compileZoo, zooSourceHash, ZOO_CONTRACTS_DIR, type CompiledContract, type ZooArtifacts } from './compile.js';

export const ZOO_BEHAVIOURS = ['honest', 'mintable', 'pausable', 'blacklist', 'proxy', 'fee-on-transfer', 'honeypot', 'no-liquidity'] as const;
export type ZooBehaviour = (typeof ZOO_BEHAVIOURS)[number];

/** Every zoo token has 18 decimals and a supply of 1,000,000 tokens. */
export const ZOO_TOKEN_SUPPLY = parseEther('1000000');
/** The fee-on-transfer token's tax, in basis points (10%). */
export const ZOO_FEE_BPS = 1000n;

export interface ZooPool {
  pair: Address;
  quote: 'WETH' | 'USDC';
  quoteAddress: Address;
  quoteDecimals: number;
  /** Seeded reserves in the smallest units, as decimal strings (JSON-safe). */
  tokenReserve: string;
  quoteReserve: string;
}

export interface ZooToken {
  behaviour: ZooBehaviour;
  address: Address;
  name: string;
  symbol: string;
  decimals: 18;
  description: string;
  /** Current owner() (null once renounced). */
  owner: Address | null;
  pool: ZooPool | null;
  /** Proxy token only: the implementation and the EIP-1967 admin. */
  implementation?: Address;
  proxyAdmin?: Address;
}

export interface ZooDeployment {
  factory: Address;
  router: Address;
  weth: Address;
  usdc: Address;
  /** A WETH/USDC pool (100 WETH against 300,000 USDC), so USDC itself can be traded. */
  wethUsdcPair: Address;
  /** The account that deployed the zoo and owns the tokens that still have an owner. */
  deployer: Address;
  /** Behaviour name -> token address (the devnet ready line's `tokens`). */
  tokens: Record<ZooBehaviour, Address>;
  details: Record<ZooBehaviour, ZooToken>;
}

/** Owner-only functions of the zoo tokens, for tests that exercise them. */
export const zooTokenAbi = parseAbi([
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
  'function totalSupply() view returns (uint256)',
  'function owner() view returns (address)',
  'function balanceOf(address) view returns (uint256)',
  'function approve(address spender, uint256 value) returns (bool)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function mint(address to, uint256 value)',
  'function pause()',
  'function unpause()',
  'function paused() view returns (bool)',
  'function blacklist(address account)',
  'function unBlacklist(address account)',
  'function setFee(uint256 feeBps)',
  'function setPool(address pool)',
  'function renounceOwnership()',
  'function upgradeTo(address implementation)',
]);

const DESCRIPTIONS: Record<ZooBehaviour, string> = {
  honest: 'Plain ERC-20, fixed supply, ownership renounced',
  mintable: 'The owner can mint without limit',
  pausable: 'The owner can pause every transfer (not paused)',
  blacklist: 'The owner can blacklist holders (nobody blacklisted)',
  proxy: 'EIP-1967 transparent proxy; a separate admin can replace the implementation',
  'fee-on-transfer': 'Every transfer pays a 10% fee to the owner; the owner can change the fee',
  honeypot: 'Buys and transfers work; sells into the pool revert for everyone but the owner',
  'no-liquidity': 'Plain ERC-20 with ownership renounced, but no pool anywhere',
};

const zooAccount = (index: number): HDAccount => mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: index });

export interface DeployZooOptions {
  /** Compiled zoo contracts (default: compileZoo(), cached on disk). */
  artifacts?: ZooArtifacts;
}

/**
 * Deploys the zoo on a devnet that already has USDC (deployUsdc) at its canonical address.
 * Pools: honest, pausable, proxy, fee-on-transfer, honeypot against WETH (500,000 tokens and
 * 10 WETH); mintable and blacklist against USDC (500,000 tokens and 25,000 USDC).
 */
export async function deployZoo(rpcUrl: string, opts: DeployZooOptions = {}): Promise<ZooDeployment> {
  const artifacts = opts.artifacts ?? compileZoo();
  const { pub, test, walletOf, mined } = devnetClients(rpcUrl, 'zoo setup', { pollingInterval: 20 });
  const deployer = zooAccount(11);
  const proxyAdmin = zooAccount(12);
  const wallet = walletOf(deployer);
  const usdcAdmin = walletOf(devnetAdmin());
  const { factory, router, weth } = BASE_UNISWAP_V2;

  if ((await pub.getCode({ address: USDC_ADDRESS })) === undefined) throw new Error('deployZoo: deploy USDC first (deployUsdc)');

  const deploy = async (name: string, args: readonly unknown[] = []): Promise<Address> => {
    const artifact = artifacts[name];
    if (!artifact) throw new Error(`zoo contract ${name} missing from the compiled artifacts`);
    const { contractAddress } = await mined(await wallet.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode, args }));
    if (!contractAddress) throw new Error(`${name}: no contract address`);
    return getAddress(contractAddress);
  };
  const send = async (to: Address, abi: Abi, functionName: string, args: readonly unknown[], value?: bigint) =>
    mined(await wallet.sendTransaction({ to, data: encodeFunctionData({ abi, functionName, args } as never), ...(value ? { value } : {}) }));

  await test.setBalance({ address: deployer.address, value: parseEther('1000000') });
  await test.setBalance({ address: proxyAdmin.address, value: parseEther('10') });
  await installUniswapV2(pub, test, deployer.address);

  // USDC for the USDC pools and the WETH/USDC pool, minted by the devnet's USDC admin.
  const usdcNeeded = parseUnits('350000', 6);
  await mined(await usdcAdmin.writeContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'configureMinter', args: [devnetAdmin().address, usdcNeeded] }));
  await mined(await usdcAdmin.writeContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'mint', args: [deployer.address, usdcNeeded] }));
  await send(USDC_ADDRESS, zooTokenAbi, 'approve', [router, maxUint256]);

  const tokenArgs = (name: string, symbol: string) => [name, symbol, ZOO_TOKEN_SUPPLY] as const;
  const names: Record<ZooBehaviour, [string, string]> = {
    honest: ['Honest Token', 'HONEST'],
    mintable: ['Mintable Token', 'MINT'],
    pausable: ['Pausable Token', 'PAUSE'],
    blacklist: ['Blacklist Token', 'BLOCK'],
    proxy: ['Proxy Token', 'PROXY'],
    'fee-on-transfer': ['Fee Token', 'FEE'],
    honeypot: ['Honeypot Token', 'HONEY'],
    'no-liquidity': ['Unlisted Token', 'NOLIQ'],
  };

  const tokens = {} as Record<ZooBehaviour, Address>;
  tokens.honest = await deploy('HonestToken', tokenArgs(...names.honest));
  tokens.mintable = await deploy('MintableToken', tokenArgs(...names.mintable));
  tokens.pausable = await deploy('PausableToken', tokenArgs(...names.pausable));
  tokens.blacklist = await deploy('BlacklistToken', tokenArgs(...names.blacklist));
  const implementation = await deploy('UpgradeableToken');
  const init = encodeFunctionData({
    abi: parseAbi(['function initialize(string, string, uint256, address)']),
    args: [names.proxy[0], names.proxy[1], ZOO_TOKEN_SUPPLY, deployer.address],
  });
  // The admin is a separate account: a transparent proxy never forwards its admin's calls.
  tokens.proxy = await deploy('ZooProxy', [implementation, proxyAdmin.address, init]);
  tokens['fee-on-transfer'] = await deploy('FeeOnTransferToken', [...tokenArgs(...names['fee-on-transfer']), ZOO_FEE_BPS]);
  tokens.honeypot = await deploy('HoneypotToken', tokenArgs(...names.honeypot));
  tokens['no-liquidity'] = await deploy('HonestToken', tokenArgs(...names['no-liquidity']));

  const tokenSide = parseEther('500000');
  const pools = {} as Record<ZooBehaviour, ZooPool | null>;
  const quotes: Record<ZooBehaviour, 'WETH' | 'USDC' | null> = {
    honest: 'WETH',
    mintable: 'USDC',
    pausable: 'WETH',
    blacklist: 'USDC',
    proxy: 'WETH',
    'fee-on-transfer': 'WETH',
    honeypot: 'WETH',
    'no-liquidity': null,
  };
  for (const behaviour of ZOO_BEHAVIOURS) {
    const quote = quotes[behaviour];
    const token = tokens[behaviour];
    if (!quote) {
      pools[behaviour] = null;
      continue;
    }
    await send(token, zooTokenAbi, 'approve', [router, maxUint256]);
    let quoteSide: bigint;
    if (quote === 'WETH') {
      quoteSide = parseEther('10');
      await send(router, uniswapAbi, 'addLiquidityETH', [token, tokenSide, 0n, 0n, deployer.address, maxUint256], quoteSide);
    } else {
      quoteSide = parseUnits('25000', 6);
      await send(router, uniswapAbi, 'addLiquidity', [token, USDC_ADDRESS, tokenSide, quoteSide, 0n, 0n, deployer.address, maxUint256]);
    }
    const quoteAddress = quote === 'WETH' ? weth : getAddress(USDC_ADDRESS);
    pools[behaviour] = {
      pair: pairAddress(BASE_UNISWAP_V2, token, quoteAddress),
      quote,
      quoteAddress,
      quoteDecimals: quote === 'WETH' ? 18 : 6,
      tokenReserve: tokenSide.toString(),
      quoteReserve: quoteSide.toString(),
    };
  }
  await send(router, uniswapAbi, 'addLiquidityETH', [USDC_ADDRESS, parseUnits('300000', 6), 0n, 0n, deployer.address, maxUint256], parseEther('100'));

  // The factory is the authority on pair addresses; the CREATE2 formula must agree with it.
  for (const behaviour of ZOO_BEHAVIOURS) {
    const pool = pools[behaviour];
    if (!pool) continue;
    const onChain = await pub.readContract({ address: factory, abi: uniswapAbi, functionName: 'getPair', args: [tokens[behaviour], pool.quoteAddress] });
    if (onChain !== pool.pair) throw new Error(`zoo: pair of ${behaviour} is ${onChain}, CREATE2 formula says ${pool.pair}`);
  }

  await send(tokens.honeypot, zooTokenAbi, 'setPool', [pools.honeypot!.pair]);
  await send(tokens.honest, zooTokenAbi, 'renounceOwnership', []);
  await send(tokens['no-liquidity'], zooTokenAbi, 'renounceOwnership', []);

  const renounced = new Set<ZooBehaviour>(['honest', 'no-liquidity']);
  const details = {} as Record<ZooBehaviour, ZooToken>;
  for (const behaviour of ZOO_BEHAVIOURS) {
    details[behaviour] = {
      behaviour,
      address: tokens[behaviour],
      name: names[behaviour][0],
      symbol: names[behaviour][1],
      decimals: 18,
      description: DESCRIPTIONS[behaviour],
      owner: renounced.has(behaviour) ? null : deployer.address,
      pool: pools[behaviour],
      ...(behaviour === 'proxy' ? { implementation, proxyAdmin: proxyAdmin.address } : {}),
    };
  }
  return {
    factory,
    router,
    weth,
    usdc: getAddress(USDC_ADDRESS),
    wethUsdcPair: pairAddress(BASE_UNISWAP_V2, weth, getAddress(USDC_ADDRESS)),
    deployer: deployer.address,
    tokens,
    details,
  };
}

/** Test helper: sends an owner-only call as the zoo deployer (e.g. pause, blacklist, setFee). */
export async function zooOwnerCall(rpcUrl: string, token: Address, functionName: string, args: readonly unknown[] = []): Promise<Hash> {
  const chain = baseDevnetChain(rpcUrl);
  const transport = http(rpcUrl);
  const pub = createPublicClient({ chain, transport, pollingInterval: 50 });
  const wallet = createWalletClient({ account: zooAccount(11), chain, transport });
  const data: Hex = encodeFunctionData({ abi: zooTokenAbi, functionName, args } as never);
  const hash = await wallet.sendTransaction({ to: token, data });
  const receipt = await pub.waitForTransactionReceipt({ hash, pollingInterval: 20 });
  if (receipt.status !== 'success') throw new Error(`${functionName} reverted`);
  return hash;
}
