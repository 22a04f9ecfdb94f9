// The preflight simulates at a real gas price: a contract that behaves well only at the node's
// default of zero (a review's finding) is seen doing what it does for real. The
// sender's gas money is handed to it inside the simulation, so a sender with little ETH is judged
// on the value alone, as before.
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeFunctionData, getAddress, parseAbi, parseEther, type Abi, type Address, type Hex } from 'viem';
import { mnemonicToAccount } from 'viem/accounts';
import { ANVIL_MNEMONIC } from '../../src/devnet/accounts.js';
import { devnetClients } from '../../src/devnet/chain.js';
import { startDevnet, type Devnet } from '../../src/devnet/index.js';
import { transactionPreflight } from '../../src/features/preflight/preflight.js';
import { createChainClient, onBase, type ChainClient } from '../../src/platform/chain.js';

const solc = createRequire(import.meta.url)('solc');
const SRC = `// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;
contract Claim {
    /// Pays the deposit back when simulated at gas price 0; sends it to 0xBEEF for real.
    function deposit() external payable {
        address to = tx.gasprice == 0 ? msg.sender : address(0xBEEF);
        (bool ok,) = to.call{value: msg.value}("");
        require(ok);
    }
}`;
const THIEF = '0x000000000000000000000000000000000000bEEF';
const abi = parseAbi(['function deposit() payable']);
const victim = mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: 19 });
const poor = '0x00000000000000000000000000000000000a11ce' as Address;
let devnet: Devnet;
let chain: ChainClient;
let claim: Address;

beforeAll(async () => {
  devnet = await startDevnet();
  chain = createChainClient({ rpcUrls: [devnet.rpcUrl], rpcTimeoutMs: 5000 });
  await onBase(chain);
  const { test, walletOf, mined } = devnetClients(devnet.rpcUrl, 'preflight evasion');
  await test.setBalance({ address: victim.address, value: parseEther('10') });
  await test.setBalance({ address: poor, value: 1000n });
  const out = JSON.parse(solc.compile(JSON.stringify({ language: 'Solidity', sources: { 'C.sol': { content: SRC } }, settings: { evmVersion: 'cancun', outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } } } })));
  const c = out.contracts['C.sol'].Claim;
  claim = getAddress((await mined(await walletOf(victim).deployContract({ abi: c.abi as Abi, bytecode: `0x${c.evm.bytecode.object}` as Hex }))).contractAddress!);
}, 120_000);

afterAll(async () => {
  await devnet?.stop();
});

const preflight = (from: Address, data: Hex, valueWei = '0') => transactionPreflight(chain, { chain: 'base', to: claim, from, valueWei, data }, new Date());

describe('a transaction that tells a zero-fee simulation from a real one', () => {
  it('the simulated ETH goes where the real transaction sends it (0xBEEF, not back to the sender)', async () => {
    const data = encodeFunctionData({ abi, functionName: 'deposit' });
    const report = await preflight(victim.address, data, parseEther('1').toString());
    expect(report.simulation.success).toBe(true);
    expect(report.simulation.balanceChanges).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ address: victim.address, delta: '-1' }),
        expect.objectContaining({ address: getAddress(THIEF), delta: '1' }),
      ]),
    );
    // And that is what the real transaction does.
    const { pub, walletOf, mined } = devnetClients(devnet.rpcUrl, 'preflight evasion');
    const before = await pub.getBalance({ address: THIEF });
    await mined(await walletOf(victim).sendTransaction({ to: claim, data, value: parseEther('1'), gas: 200_000n }));
    expect((await pub.getBalance({ address: THIEF })) - before).toBe(parseEther('1'));
  });

  it('a sender with almost no ETH is judged on the value alone, as at gas price 0', async () => {
    const free = await preflight(poor, encodeFunctionData({ abi, functionName: 'deposit' }));
    expect(free.simulation.success).toBe(true);
    expect(free.findings.map((f) => f.code)).not.toContain('insufficient_native_balance');
    const tooMuch = await preflight(poor, encodeFunctionData({ abi, functionName: 'deposit' }), '1001');
    expect(tooMuch.findings.map((f) => f.code)).toContain('insufficient_native_balance');
    expect(tooMuch.verdict.decision).toBe('BLOCK');
  });
});
