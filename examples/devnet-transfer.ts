// Devnet only: send a plain USDC transfer and print its transaction hash, to reconcile an evidence
// chain's settlement against (README, "Evidence chains").
//
//   DEVNET_JSON="$(grep '^devnet ready' /tmp/devnet.out)" npx tsx examples/devnet-transfer.ts <to> <amount> [account]
//
// <amount> is a decimal USDC string ("12.5"); [account] is the index of the devnet account that
// pays (default 1). The devnet's accounts are anvil's public test keys: this refuses any RPC that
// is not on loopback, so it can never sign on a real network.
import { createWalletClient, erc20Abi, http, isAddress, parseUnits, publicActions, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';

interface DevnetReady { rpc: string; usdc: Hex; accounts: { index: number; privateKey: Hex }[] }

const [to, amount, index = '1'] = process.argv.slice(2);
const line = process.env.DEVNET_JSON?.replace(/^\s*devnet ready\s*/, '');
if (!line || !to || !amount) fail('usage: DEVNET_JSON=<devnet ready line> npx tsx examples/devnet-transfer.ts <to> <amount> [account]');
if (!isAddress(to)) fail(`not an address: ${to}`);
if (!/^[0-9]{1,12}(\.[0-9]{1,6})?$/.test(amount)) fail(`not a USDC amount (at most 6 decimals): ${amount}`);
const devnet = JSON.parse(line) as DevnetReady;
if (!/^https?:\/\/(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(`${devnet.rpc}/`)) fail(`refusing a non-loopback RPC: ${devnet.rpc}`);
const payer = devnet.accounts.find((a) => a.index === Number(index));
if (!payer) fail(`no devnet account ${index}`);

const wallet = createWalletClient({ chain: base, transport: http(devnet.rpc), account: privateKeyToAccount(payer.privateKey) }).extend(publicActions);
const hash = await wallet.writeContract({ address: devnet.usdc, abi: erc20Abi, functionName: 'transfer', args: [to, parseUnits(amount, 6)] });
const receipt = await wallet.waitForTransactionReceipt({ hash });
if (receipt.status !== 'success') fail(`the transfer reverted: ${hash}`);
console.log(hash);

function fail(message: string): never {
  console.error(message);
  process.exit(1);
}
