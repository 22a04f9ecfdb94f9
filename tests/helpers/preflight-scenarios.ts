// Real transactions for every preflight finding, on a running devnet: the fixtures deployed,
// the on-chain history some findings need (approvals, a poisoned payment history, an EIP-7702
// delegation), and for each case the unsigned input and the verdict it deserves. The devnet
// tests call the producer with these; the paid tests send them through x402.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import {
  concat,
  encodeFunctionData,
  getAddress,
  maxUint160,
  maxUint256,
  parseAbi,
  parseEther,
  type Abi,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { devnetAdmin, devnetClients, MULTICALL3_ADDRESS, USDC_ADDRESS, type Devnet } from '../../src/devnet/index.js';
import { deployPreflightFixtures, type PreflightFixtures } from '../../src/devnet/preflight-fixtures.js';

export interface Case {
  input: { chain: 'base'; to: string; from?: string; valueWei?: string; data?: string };
  decision: 'ALLOW' | 'WARN' | 'BLOCK' | 'INCOMPLETE';
  /** Finding codes in report order (block, warn, info). */
  codes: string[];
  revertReason?: string;
}

export interface Scenarios {
  fixtures: PreflightFixtures;
  /** Senders: main (1), recipient (2), spender EOA (3), poisoning victim (4), EIP-7702 account (6). */
  who: { sender: Address; recipient: Address; spender: Address; victim: Address; delegated: Address; payee: Address; lookalike: Address };
}

const erc20 = parseAbi([
  'function transfer(address to, uint256 amount) returns (bool)',
  'function transferFrom(address from, address to, uint256 amount) returns (bool)',
  'function approve(address spender, uint256 amount) returns (bool)',
  'function increaseAllowance(address spender, uint256 increment) returns (bool)',
  'function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)',
  'function setApprovalForAll(address operator, bool approved)',
  'struct Call3 { address target; bool allowFailure; bytes callData; }',
  'function aggregate3(Call3[] calls) payable returns ((bool success, bytes returnData)[] returnData)',
  'function approve(address token, address spender, uint160 amount, uint48 expiration)',
]);
const enc = (functionName: string, args: unknown[], abi: Abi = erc20) => encodeFunctionData({ abi, functionName, args } as never) as Hex;
const routerAbi = (JSON.parse(readFileSync(createRequire(import.meta.url).resolve('@uniswap/v2-periphery/build/UniswapV2Router02.json'), 'utf8')) as { abi: Abi }).abi;
const USDC = USDC_ADDRESS;
const DEAD = '0x000000000000000000000000000000000000dEaD';
const ZERO = '0x0000000000000000000000000000000000000000';
const ZERO32 = `0x${'00'.repeat(32)}` as Hex;
/** Nov 2023: in the past for the devnet's clock and for the test clock alike. */
const EXPIRED = 1_700_000_000n;

export async function preparePreflightScenarios(devnet: Devnet): Promise<Scenarios> {
  const f = await deployPreflightFixtures(devnet.rpcUrl);
  const { pub, test, walletOf, mined } = devnetClients(devnet.rpcUrl, 'scenario setup');
  const addr = (i: number) => devnet.accounts[i]!.address;
  const send = async (i: number, to: Address, data: Hex, value = 0n): Promise<Hash> => {
    const hash = await walletOf(privateKeyToAccount(devnet.accounts[i]!.privateKey)).sendTransaction({ to, data, value });
    await mined(hash);
    return hash;
  };
  const [sender, recipient, spender, victim, delegated] = [1, 2, 3, 4, 6].map(addr) as [Address, Address, Address, Address, Address];
  const payee = getAddress('0xabcd00000000000000000000000000000000f00d');
  const lookalike = getAddress('0xabcd77777777777777777777777777777777f00d');

  // History: the sender approved the router and the "airdrop" drainer; holds some PFT; the
  // Delegator holds 1 ETH; the victim paid `payee` and was then poisoned with a zero-value
  // transferFrom to the look-alike (as poisoners do, from their own account).
  await send(1, USDC, enc('approve', [f.router, maxUint256]));
  await send(1, USDC, enc('approve', [f.drainer, maxUint256]));
  const admin = walletOf(devnetAdmin()); // deployed PFT, holds the rest of its supply
  await pub.waitForTransactionReceipt({ hash: await admin.sendTransaction({ to: f.token, data: enc('transfer', [sender, parseEther('10')]) }) });
  await send(1, f.delegator, '0x', parseEther('1'));
  await send(4, USDC, enc('transfer', [payee, 25_000_000n]));
  await send(7, USDC, enc('transferFrom', [victim, lookalike, 0n])); // account 7 plays the poisoner
  await test.setCode({ address: delegated, bytecode: concat(['0xef0100', f.delegator]) });

  return { fixtures: f, who: { sender, recipient, spender, victim, delegated, payee, lookalike } };
}

/** What a case is built from: the prepared chain and a few calldata helpers. */
function toolsOf(sc: Scenarios) {
  const f = sc.fixtures;
  const tx = (to: string, data?: Hex, extra: Partial<Case['input']> = {}): Case['input'] => ({ chain: 'base', to, from: sc.who.sender, ...(data ? { data } : {}), ...extra });
  return {
    f,
    ...sc.who,
    tx,
    sweep: (to: Address) => enc('run', [f.sweepLib, enc('sweep', [to], f.compiled.SweepLib.abi)], f.compiled.Delegator.abi),
    swap: (to: Address) => enc('swapExactTokensForTokens', [10_000_000n, 0n, [USDC, f.token], to, 2n ** 40n], routerAbi),
    reverter: (fn: string, args: unknown[] = []) => tx(f.reverter, enc(fn, args, f.compiled.Reverter.abi)),
  };
}
type T = ReturnType<typeof toolsOf>;
const allow = (codes: string[] = []) => ({ decision: 'ALLOW' as const, codes });
const warn = (...codes: string[]) => ({ decision: 'WARN' as const, codes });
const block = (codes: string[], revertReason?: string) => ({ decision: 'BLOCK' as const, codes, ...(revertReason ? { revertReason } : {}) });

/** Every case, by name; each is a function of the prepared chain so that the names exist before it does. */
const CASES: Record<string, (t: T) => Case> = {
  'plain USDC transfer': (t) => ({ input: t.tx(USDC, enc('transfer', [t.recipient, 1_500_000n])), ...allow() }),
  'USDC transfer without a sender': (t) => ({ input: { chain: 'base', to: USDC, data: enc('transfer', [t.recipient, 1_500_000n]) }, ...allow(['fresh_sender']) }),
  'swap USDC for PFT on Uniswap v2': (t) => ({ input: t.tx(t.f.router, t.swap(t.sender)), ...allow() }),
  'swap ETH for USDC on Uniswap v2': (t) => ({
    input: t.tx(t.f.router, enc('swapExactETHForTokens', [0n, [t.f.weth, USDC], t.sender, 2n ** 40n], routerAbi), { valueWei: parseEther('1').toString() }),
    ...allow(),
  }),
  'revoke an allowance': (t) => ({ input: t.tx(USDC, enc('approve', [t.f.router, 0n])), ...allow(['approval_revoked']) }),
  'call through a forwarding proxy': (t) => ({ input: t.tx(t.f.proxy, enc('approve', [t.f.router, 5n])), ...allow(['proxy_destination']) }),
  'known payee': (t) => ({ input: { ...t.tx(USDC, enc('transfer', [t.payee, 1_000_000n])), from: t.victim }, ...allow() }),

  'unlimited approve to an EOA': (t) => ({ input: t.tx(USDC, enc('approve', [t.spender, maxUint256])), ...warn('approval_unlimited', 'approval_to_eoa') }),
  'unlimited approve to the router': (t) => ({ input: t.tx(USDC, enc('approve', [t.f.router, maxUint256])), ...warn('approval_unlimited') }),
  'approve above total supply': (t) => ({ input: t.tx(t.f.token, enc('approve', [t.f.router, parseEther('1000000') + 1n])), ...warn('approval_very_large') }),
  'increaseAllowance to an EOA': (t) => ({ input: t.tx(USDC, enc('increaseAllowance', [t.spender, 5_000_000n])), ...warn('approval_to_eoa') }),
  'Permit2 unlimited approve to an EOA': (t) => ({ input: t.tx(t.f.permit2, enc('approve', [USDC, t.spender, maxUint160, 2n ** 40n])), ...warn('approval_unlimited', 'approval_to_eoa') }),
  'setApprovalForAll to an EOA': (t) => ({ input: t.tx(t.f.nft, enc('setApprovalForAll', [t.spender, true])), ...warn('approval_to_eoa', 'approval_for_all') }),
  'calldata sent to an EOA': (t) => ({ input: t.tx(t.recipient, enc('transfer', [t.recipient, 1_000_000n])), ...warn('calldata_to_eoa') }),
  'EIP-7702 delegated destination sweeping itself': (t) => ({
    input: { ...t.tx(t.delegated, t.sweep(t.f.collector)), from: t.delegated },
    ...warn('delegated_destination', 'delegatecall_in_trace'),
  }),
  'unlimited approve to an EOA inside a smart account call (seen in the logs only)': (t) => ({
    input: { ...t.tx(t.delegated, enc('execute', [USDC, 0n, enc('approve', [t.spender, maxUint256])], t.f.compiled.Delegator.abi)), from: t.delegated },
    ...warn('delegated_destination', 'approval_unlimited', 'approval_to_eoa'),
  }),
  'delegatecall into library code': (t) => ({ input: t.tx(t.f.delegator, t.sweep(t.recipient)), ...warn('delegatecall_in_trace') }),
  'USDC pulled by an airdrop drainer': (t) => ({ input: t.tx(t.f.drainer, enc('claimAirdrop', [USDC, 100_000_000n], t.f.compiled.Drainer.abi)), ...warn('usdc_outflow_without_return') }),
  'swap with the output sent elsewhere': (t) => ({ input: t.tx(t.f.router, t.swap(t.recipient)), ...warn('usdc_outflow_without_return') }),

  'revert with a reason': (t) => ({ input: t.reverter('failWithReason'), ...block(['simulation_reverted'], 'vault is closed') }),
  'revert with a known custom error': (t) => ({ input: t.reverter('failWithKnownError'), ...block(['simulation_reverted'], `ERC20InsufficientBalance(sender=${t.sender}, balance=0, needed=1)`) }),
  'revert with an unknown custom error': (t) => ({ input: t.reverter('failWithCustomError'), ...block(['simulation_reverted'], 'custom error 0x38499ee6') }),
  'revert with a panic': (t) => ({ input: t.reverter('failWithPanic', [5n]), ...block(['simulation_reverted'], 'panic 0x32: array index out of bounds') }),
  'USDC transfer above the balance': (t) => ({ input: t.tx(USDC, enc('transfer', [t.recipient, 10n ** 12n])), ...block(['simulation_reverted'], 'ERC20: transfer amount exceeds balance') }),
  'expired ERC-2612 permit to an EOA': (t) => ({
    input: t.tx(USDC, enc('permit', [t.sender, t.spender, maxUint256, EXPIRED, 27, ZERO32, ZERO32])),
    ...block(['simulation_reverted', 'approval_unlimited', 'permit_expired', 'approval_to_eoa'], 'FiatTokenV2: permit is expired'),
  }),
  'ETH to a contract without receive': (t) => ({ input: t.tx(t.f.rejectsEth, undefined, { valueWei: '1000' }), ...block(['simulation_reverted', 'native_value_rejected'], 'reverted without a reason') }),
  'ETH to a non-payable function': (t) => ({ input: t.tx(t.f.rejectsEth, enc('ping', [], t.f.compiled.RejectsEth.abi), { valueWei: '1000' }), ...block(['simulation_reverted', 'native_value_rejected']) }),
  'ETH beyond the balance': (t) => ({ input: t.tx(t.recipient, undefined, { valueWei: parseEther('1000000').toString() }), ...block(['insufficient_native_balance']) }),
  'tokens to the token contract': (t) => ({ input: t.tx(t.f.token, enc('transfer', [t.f.token, 1n])), ...block(['transfer_to_token_contract']) }),
  'USDC to the USDC contract': (t) => ({ input: t.tx(USDC, enc('transfer', [USDC, 1n])), ...block(['simulation_reverted', 'transfer_to_token_contract'], 'Blacklistable: account is blacklisted') }),
  'USDC to the dead address': (t) => ({ input: t.tx(USDC, enc('transfer', [DEAD, 1_000_000n])), ...block(['transfer_to_burn_address']) }),
  'USDC to the zero address': (t) => ({ input: t.tx(USDC, enc('transfer', [ZERO, 1n])), ...block(['simulation_reverted', 'transfer_to_burn_address'], 'ERC20: transfer to the zero address') }),
  'ETH to the dead address': (t) => ({ input: t.tx(DEAD, undefined, { valueWei: '1000' }), ...block(['transfer_to_burn_address']) }),
  'payment to a poisoned look-alike': (t) => ({ input: { ...t.tx(USDC, enc('transfer', [t.lookalike, 1_000_000n])), from: t.victim }, ...block(['recipient_address_poisoning']) }),
  'Multicall3 batch with an approval and a transfer to the token': (t) => ({
    input: t.tx(MULTICALL3_ADDRESS, enc('aggregate3', [[
      { target: USDC, allowFailure: true, callData: enc('approve', [t.spender, maxUint256]) },
      { target: t.f.token, allowFailure: true, callData: enc('transfer', [t.f.token, 1n]) },
    ]])),
    ...block(['transfer_to_token_contract', 'approval_unlimited', 'approval_to_eoa']),
  }),
};

export const PREFLIGHT_CASE_NAMES = Object.keys(CASES);

export function preflightCase(name: string, sc: Scenarios): Case {
  const build = CASES[name];
  if (!build) throw new Error(`no preflight case ${name}`);
  return build(toolsOf(sc));
}
