// Tokens built to look safe to the token-risk report, each caught by a rule a review found missing.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeFunctionData, getAddress, maxUint256, parseAbi, parseEther, type Abi, type Address, type Hex } from 'viem';
import { mnemonicToAccount } from 'viem/accounts';
import { startDevnet, type Devnet } from '../../src/devnet/index.js';
import { devnetClients } from '../../src/devnet/chain.js';
import { ANVIL_MNEMONIC } from '../../src/devnet/accounts.js';
import { ZOO_CONTRACTS_DIR } from '../../src/devnet/zoo/index.js';
import { uniswapAbi } from '../../src/devnet/zoo/uniswap.js';
import { BASE_UNISWAP_V2, pairAddress } from '../../src/features/token-risk/dex.js';
import { tokenRisk } from '../../src/features/token-risk/report.js';
import { createChainClient, onBase, type ChainClient } from '../../src/platform/chain.js';

const require = createRequire(import.meta.url);
const solc = require('solc');

const SRC = `// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;
import {ZooERC20} from "./ZooERC20.sol";
/// Sells revert for real transactions (gas price > 0) but not in a zero-gas-price simulation.
contract GasHoneypot is ZooERC20 {
    address public pool;
    constructor(string memory n, string memory s, uint256 supply) { _init(n, s, supply, msg.sender); }
    function setPool(address p) external onlyOwner { pool = p; }
    function _transfer(address from, address to, uint256 value) internal override {
        if (to == pool && pool != address(0) && tx.gasprice > 0) revert();
        _move(from, to, value);
    }
}
/// Ownership renounced, but a separate minter keeps minting.
contract HiddenMinter is ZooERC20 {
    address public minter;
    constructor(string memory n, string memory s, uint256 supply) { _init(n, s, supply, msg.sender); minter = msg.sender; }
    function mint(address to, uint256 value) external { require(msg.sender == minter); _mint(to, value); }
}
/// owner() renounced, getOwner() still names a live admin that can mint.
contract FakeRenounce is ZooERC20 {
    address public admin;
    constructor(string memory n, string memory s, uint256 supply) { _init(n, s, supply, msg.sender); admin = msg.sender; }
    function getOwner() external view returns (address) { return admin; }
    function mint(address to, uint256 value) external { require(msg.sender == admin); _mint(to, value); }
}
`;

function compile() {
  const input = {
    language: 'Solidity',
    sources: { 'Review.sol': { content: SRC }, 'ZooERC20.sol': { content: readFileSync(`${ZOO_CONTRACTS_DIR}/ZooERC20.sol`, 'utf8') } },
    settings: { optimizer: { enabled: true, runs: 200 }, evmVersion: 'cancun', outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } } },
  };
  const out = JSON.parse(solc.compile(JSON.stringify(input)));
  const errs = (out.errors ?? []).filter((e: { severity: string }) => e.severity === 'error');
  if (errs.length) throw new Error(JSON.stringify(errs));
  const c = out.contracts['Review.sol'];
  return Object.fromEntries(Object.entries(c).map(([k, v]: [string, any]) => [k, { abi: v.abi as Abi, bytecode: `0x${v.evm.bytecode.object}` as Hex }]));
}

const abi = parseAbi([
  'function approve(address, uint256) returns (bool)',
  'function setPool(address)',
  'function renounceOwnership()',
  'function mint(address, uint256)',
  'function totalSupply() view returns (uint256)',
  'function owner() view returns (address)',
]);

let devnet: Devnet;
let chain: ChainClient;
const tokens: Record<string, Address> = {};
let clients: ReturnType<typeof devnetClients>;
const deployerAcc = mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: 17 });

beforeAll(async () => {
  devnet = await startDevnet({ zoo: true });
  chain = createChainClient({ rpcUrls: [devnet.rpcUrl], rpcTimeoutMs: 5000 });
  await onBase(chain);
  clients = devnetClients(devnet.rpcUrl, 'review');
  const { test, walletOf, mined } = clients;
  await test.setBalance({ address: deployerAcc.address, value: parseEther('1000') });
  const wallet = walletOf(deployerAcc);
  const art = compile();
  const send = async (to: Address, functionName: string, args: readonly unknown[], value?: bigint, a: Abi = abi as Abi) =>
    mined(await wallet.sendTransaction({ to, data: encodeFunctionData({ abi: a, functionName, args } as never), ...(value ? { value } : {}) }));
  for (const name of ['GasHoneypot', 'HiddenMinter', 'FakeRenounce']) {
    const { contractAddress } = await mined(await wallet.deployContract({ abi: art[name]!.abi, bytecode: art[name]!.bytecode, args: [name, name.slice(0, 4).toUpperCase(), parseEther('1000000')] }));
    const token = getAddress(contractAddress!);
    tokens[name] = token;
    await send(token, 'approve', [BASE_UNISWAP_V2.router, maxUint256]);
    await send(BASE_UNISWAP_V2.router, 'addLiquidityETH', [token, parseEther('500000'), 0n, 0n, deployerAcc.address, maxUint256], parseEther('10'), uniswapAbi as Abi);
  }
  await send(tokens.GasHoneypot!, 'setPool', [pairAddress(BASE_UNISWAP_V2, tokens.GasHoneypot!, BASE_UNISWAP_V2.weth)]);
  await send(tokens.GasHoneypot!, 'renounceOwnership', []);
  await send(tokens.HiddenMinter!, 'renounceOwnership', []);
  await send(tokens.FakeRenounce!, 'renounceOwnership', []);
}, 180_000);
afterAll(async () => { await devnet?.stop(); });

describe('tokens that looked safe to the token-risk report (found in review)', () => {
  it('a honeypot whose sells revert only at a non-zero gas price: BLOCK sell_reverts (the simulation pays a real fee)', async () => {
    const r = await tokenRisk(chain, { chain: 'base', address: tokens.GasHoneypot! }, new Date());
    expect(r.verdict).toMatchObject({ decision: 'BLOCK', reasons: ['sell_reverts'] });
    expect(r.simulation).toMatchObject({ buy: { status: 'ok' }, sell: { status: 'reverted' } });
    // What a real seller meets: the same sell reverts with a gas price, not without one.
    const seller = deployerAcc.address;
    const sell = encodeFunctionData({ abi: parseAbi(['function swapExactTokensForETHSupportingFeeOnTransferTokens(uint256,uint256,address[],address,uint256)']) as Abi, functionName: 'swapExactTokensForETHSupportingFeeOnTransferTokens', args: [parseEther('100'), 0n, [tokens.GasHoneypot!, BASE_UNISWAP_V2.weth], seller, maxUint256] } as never);
    const outcome = (gasPrice?: bigint) => clients.pub.call({ account: seller, to: BASE_UNISWAP_V2.router, data: sell, ...(gasPrice ? { gasPrice } : {}) }).then(() => 'ok', () => 'reverted');
    expect(await outcome()).toBe('ok');
    expect(await outcome(10n ** 9n)).toBe('reverted');
  });

  it('ownership renounced but a minter kept in its own variable: mint_function medium, WARN', async () => {
    const r = await tokenRisk(chain, { chain: 'base', address: tokens.HiddenMinter! }, new Date());
    expect(r.verdict.decision).toBe('WARN');
    expect(r.verdict.reasons).toContain('mint_function');
    expect(r.risk.breakdown.privileges.findings).toContainEqual(expect.objectContaining({ code: 'mint_function', severity: 'medium', evidence: expect.objectContaining({ controllable: 'unknown' }) }));
  });

  it('owner() renounced but getOwner() names a live admin who can mint: owner_active via getOwner(), mint_function high, WARN', async () => {
    const r = await tokenRisk(chain, { chain: 'base', address: tokens.FakeRenounce! }, new Date());
    expect(r.verdict).toMatchObject({ decision: 'WARN', level: 'high' });
    expect(r.risk.breakdown.ownership.findings).toContainEqual(expect.objectContaining({ code: 'owner_active', evidence: expect.objectContaining({ owner: deployerAcc.address, function: 'getOwner()' }) }));
    expect(r.risk.breakdown.privileges.findings).toContainEqual(expect.objectContaining({ code: 'mint_function', severity: 'high' }));
  });
});
