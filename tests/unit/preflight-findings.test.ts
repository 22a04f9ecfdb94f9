import { describe, expect, it } from 'vitest';
import { encodeFunctionData, maxUint160, maxUint256, parseAbi, type Address, type Hex } from 'viem';
import { approvalsOf } from '../../src/features/preflight/assets.js';
import { decodeCalldata } from '../../src/features/preflight/calldata.js';
import { findingsOf, kindOf, undecodedApprovals } from '../../src/features/preflight/findings.js';
import { DEAD_ADDRESS, PERMIT2_ADDRESS, USDC, ZERO_ADDRESS } from '../../src/features/preflight/known.js';
import { decodeRevert, type DecodedRevert } from '../../src/features/preflight/revert.js';
import { verdictOf } from '../../src/features/preflight/verdict.js';
import { ACCOUNTS, CONTRACT, DELEGATED, EOA, NFT, NOW, SENDER, TOKEN, TOKENS, codes, enc, evidence, move, reverted, run } from '../helpers/preflight-evidence.js';

describe('a clean transaction', () => {
  it('has no findings and is ALLOW with score 0 and high confidence', () => {
    const e = evidence({ movements: [move(USDC, SENDER, EOA, 1_000_000n)] });
    expect(findingsOf(e, NOW)).toEqual([]);
    expect(verdictOf([], e)).toEqual({ decision: 'ALLOW', score: 0, confidence: 'high' });
  });
});

describe('simulation outcome', () => {
  it('simulation_unavailable is info and makes the verdict INCOMPLETE with a null score', () => {
    const e = evidence({ simulation: { ran: false, success: null, unavailable: 'eth_call failed' } });
    const f = findingsOf(e, NOW);
    expect(f).toEqual([{ code: 'simulation_unavailable', severity: 'info', message: 'The transaction could not be simulated: eth_call failed.', evidence: {} }]);
    expect(verdictOf(f, e)).toEqual({ decision: 'INCOMPLETE', score: null, confidence: 'low' });
  });

  it('simulation_reverted is block with the caller\'s sender and warn with a fresh one, with the decoded reason', () => {
    const r = decodeRevert('0x08c379a000000000000000000000000000000000000000000000000000000000000000200000000000000000000000000000000000000000000000000000000000000004626f6f6d00000000000000000000000000000000000000000000000000000000');
    const f = findingsOf(evidence({ simulation: reverted(r) }), NOW);
    expect(f).toEqual([{
      code: 'simulation_reverted', severity: 'block', message: 'The transaction reverts: boom.',
      evidence: { revertReason: 'boom', errorKind: 'error-string', selector: '0x08c379a0', errorName: 'Error', errorArgs: null, senderProvided: true },
    }]);
    expect(run({ simulation: reverted(r), senderProvided: false })).toEqual(['warn:simulation_reverted', 'info:fresh_sender']);
  });

  it('insufficient_native_balance replaces the revert finding', () => {
    const revert: DecodedRevert = { kind: 'insufficient-funds', reason: 'no ETH', selector: null, errorName: null, args: null };
    expect(run({ to: EOA, data: '0x', value: 10n, simulation: { success: false, revert } })).toEqual(['block:insufficient_native_balance']);
  });

  it('fresh_sender is info and lowers confidence', () => {
    const e = evidence({ senderProvided: false });
    expect(codes(findingsOf(e, NOW))).toEqual(['info:fresh_sender']);
    expect(verdictOf(findingsOf(e, NOW), e)).toEqual({ decision: 'ALLOW', score: 0, confidence: 'medium' });
  });
});

describe('native value', () => {
  const value = 10n ** 18n;
  it('native_value_rejected when the revert disappears without value', () => {
    expect(run({ to: CONTRACT, value, data: '0x12345678', simulation: { ...reverted(), valueRejected: true } })).toEqual(['block:simulation_reverted', 'block:native_value_rejected']);
    expect(run({ to: CONTRACT, value, data: '0x12345678', simulation: { ...reverted(), valueRejected: false } })).toEqual(['block:simulation_reverted']);
  });

  it('native_value_rejected for a plain value send that a contract or delegated EOA reverts', () => {
    expect(run({ to: CONTRACT, value, data: '0x', simulation: { ...reverted(), valueRejected: false } })).toContain('block:native_value_rejected');
    expect(run({ to: DELEGATED, value, data: '0x', simulation: reverted() })).toContain('block:native_value_rejected');
    expect(run({ to: EOA, value, data: '0x', simulation: reverted() })).not.toContain('block:native_value_rejected');
    expect(run({ to: CONTRACT, value: 0n, data: '0x', simulation: reverted() })).not.toContain('block:native_value_rejected');
  });

  it('without the value-less comparison, infers a rejection from an empty revert with no inner call', () => {
    const trace = (n: number) => ({ delegatecalls: [], topLevelSubcalls: n, frames: 1 + n });
    expect(run({ to: CONTRACT, value, data: '0x12345678', simulation: reverted(), trace: trace(0) })).toContain('block:native_value_rejected');
    expect(run({ to: CONTRACT, value, data: '0x12345678', simulation: reverted(), trace: trace(1) })).not.toContain('block:native_value_rejected');
    expect(run({ to: CONTRACT, value, data: '0x12345678', simulation: reverted(decodeRevert('0x12345678')), trace: trace(0) })).not.toContain('block:native_value_rejected');
  });

  it('transfer_to_burn_address for value sent to the zero or dead address', () => {
    expect(run({ to: DEAD_ADDRESS, value, data: '0x' })).toEqual(['block:transfer_to_burn_address']);
    expect(run({ to: ZERO_ADDRESS, value, data: '0x', accounts: new Map() })).toEqual(['block:transfer_to_burn_address']);
    // A precompile takes the ETH and can never send it on.
    for (const to of ['0x0000000000000000000000000000000000000001', '0x0000000000000000000000000000000000000100'] as const) {
      expect(run({ to, value, data: '0x', accounts: new Map() })).toEqual(['block:transfer_to_burn_address']);
    }
    expect(run({ to: DEAD_ADDRESS, value: 0n, data: '0x' })).toEqual([]);
  });
});

describe('destination', () => {
  it('calldata_to_eoa names the decoded function', () => {
    const f = findingsOf(evidence({ to: EOA }), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'calldata_to_eoa', severity: 'warn', evidence: { to: EOA, function: 'transfer(address,uint256)', selector: '0xa9059cbb' } })]);
    expect(run({ to: EOA, data: '0x' })).toEqual([]);
    expect(run({ to: CONTRACT, data: '0x12345678' })).toEqual([]);
    // What the calldata encodes will not happen, so it raises nothing else (no unlimited approval).
    expect(run({ to: EOA, data: enc('approve', [EOA, maxUint256]) })).toEqual(['warn:calldata_to_eoa']);
    // Unknown kind (context unread): no guess.
    expect(run({ to: EOA, accounts: new Map(), data: enc('transfer', [CONTRACT, 1n]) })).toEqual([]);
    // ...either way: an unread destination is not taken for an EOA, so what its calldata grants still counts.
    expect(run({ data: enc('approve', [CONTRACT, maxUint256]), accounts: new Map() })).toEqual(['warn:approval_unlimited']);
  });

  it('delegated_destination for an EIP-7702 account, with its delegate; no calldata_to_eoa for it', () => {
    const f = findingsOf(evidence({ to: DELEGATED, data: '0x12345678' }), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'delegated_destination', severity: 'warn', evidence: { to: DELEGATED, delegate: CONTRACT } })]);
  });

  it('kindOf: precompile by address, else by code, else unknown', () => {
    expect(kindOf('0x0000000000000000000000000000000000000005', new Map())).toBe('precompile');
    expect([kindOf(EOA, ACCOUNTS), kindOf(CONTRACT, ACCOUNTS), kindOf(DELEGATED, ACCOUNTS), kindOf(SENDER, ACCOUNTS)]).toEqual(['eoa', 'contract', 'delegated-eoa', null]);
  });
});

describe('token transfers in calldata', () => {
  it('transfer_to_token_contract, also through transferFrom', () => {
    expect(run({ to: TOKEN, data: enc('transfer', [TOKEN, 1n]) })).toEqual(['block:transfer_to_token_contract']);
    expect(run({ to: TOKEN, data: enc('transferFrom', [SENDER, TOKEN, 1n]) })).toEqual(['block:transfer_to_token_contract']);
  });

  it('transfer_to_burn_address for tokens sent to zero or dead', () => {
    expect(run({ data: enc('transfer', [ZERO_ADDRESS, 1n]) })).toEqual(['block:transfer_to_burn_address']);
    expect(run({ data: enc('transfer', ['0x0000000000000000000000000000000000000004', 1_000_000n]) })).toEqual(['block:transfer_to_burn_address']);
    const f = findingsOf(evidence({ to: TOKEN, data: enc('transfer', [DEAD_ADDRESS, 5n]) }), NOW);
    expect(f[0]).toMatchObject({ code: 'transfer_to_burn_address', evidence: { token: TOKEN, symbol: 'TKN', to: DEAD_ADDRESS, amount: '5', via: 'transfer(address,uint256)', path: '0' } });
  });
});

describe('approvals', () => {
  it('approval_unlimited at max uint256, max uint160 (Permit2) and from 2^128', () => {
    expect(run({ data: enc('approve', [CONTRACT, maxUint256]) })).toEqual(['warn:approval_unlimited']);
    const permit2 = encodeFunctionData({ abi: parseAbi(['function approve(address token, address spender, uint160 amount, uint48 expiration)']), args: [USDC, CONTRACT, maxUint160, 1] });
    expect(run({ to: PERMIT2_ADDRESS, data: permit2 })).toEqual(['warn:approval_unlimited']);
    expect(run({ data: enc('approve', [CONTRACT, 2n ** 128n]) })).toEqual(['warn:approval_unlimited']);
    // Just below the unlimited threshold is still far above any USDC supply (next test).
    expect(run({ data: enc('approve', [CONTRACT, 2n ** 128n - 1n]) })).toEqual(['warn:approval_very_large']);
  });

  it('approval_very_large for USDC, whose supply is not read, above 100 billion USDC', () => {
    expect(run({ data: enc('approve', [CONTRACT, 10n ** 17n + 1n]) })).toEqual(['warn:approval_very_large']);
    expect(run({ data: enc('approve', [CONTRACT, 10n ** 17n]) })).toEqual([]);
    expect(run({ data: enc('approve', [CONTRACT, 10n ** 30n]) })).toEqual(['warn:approval_very_large']);
  });

  it('approval_very_large above the total supply, only when the supply is known and positive', () => {
    expect(run({ to: TOKEN, data: enc('approve', [CONTRACT, 10n ** 24n + 1n]) })).toEqual(['warn:approval_very_large']);
    expect(run({ to: TOKEN, data: enc('approve', [CONTRACT, 10n ** 24n]) })).toEqual([]);
    const noSupply = new Map(TOKENS).set(TOKEN.toLowerCase(), { name: null, symbol: 'T', decimals: 18, totalSupply: 0n, standard: 'erc20' });
    expect(run({ to: TOKEN, data: enc('approve', [CONTRACT, 5n]), tokens: noSupply })).toEqual([]);
  });

  it('approval_unlimited also for a token whose metadata could not be read', () => {
    // CONTRACT has code but no entry in TOKENS: its standard is unknown, so not taken for an ERC-721.
    expect(run({ to: CONTRACT, data: enc('approve', [TOKEN, maxUint256]) })).toEqual(['warn:approval_unlimited']);
  });

  it('approval_to_eoa for an EOA or delegated EOA spender, with unlimited reported beside it', () => {
    expect(run({ data: enc('approve', [EOA, maxUint256]) })).toEqual(['warn:approval_unlimited', 'warn:approval_to_eoa']);
    const f = findingsOf(evidence({ data: enc('approve', [DELEGATED, 5n]) }), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'approval_to_eoa', evidence: expect.objectContaining({ spender: DELEGATED, spenderKind: 'delegated-eoa', symbol: 'USDC' }) })]);
    expect(run({ data: enc('approve', [SENDER, 5n]) })).toEqual([]); // kind unknown: no guess
  });

  it('approval_revoked for a zero allowance, never approval_to_eoa', () => {
    expect(run({ data: enc('approve', [EOA, 0n]) })).toEqual(['info:approval_revoked']);
  });

  it('permit: approval findings and permit_expired when the deadline has passed', () => {
    const past = BigInt(Math.floor(NOW.getTime() / 1000) - 1);
    const zero = `0x${'00'.repeat(32)}` as Hex;
    expect(run({ data: enc('permit', [SENDER, EOA, maxUint256, past, 27, zero, zero]) })).toEqual(['warn:approval_unlimited', 'warn:permit_expired', 'warn:approval_to_eoa']);
    expect(run({ data: enc('permit', [SENDER, CONTRACT, 5n, past + 10n, 27, zero, zero]) })).toEqual([]);
    // EIP-2612 accepts block.timestamp <= deadline: a deadline of exactly now has not passed.
    expect(run({ data: enc('permit', [SENDER, CONTRACT, 5n, past + 1n, 27, zero, zero]) })).toEqual([]);
    // A deadline of 0 is not "no deadline": USDC (FiatTokenV2_2), OpenZeppelin's ERC20Permit and
    // Permit2's sigDeadline all refuse it as long past.
    expect(run({ data: enc('permit', [SENDER, CONTRACT, 5n, 0n, 27, zero, zero]) })).toEqual(['warn:permit_expired']);
  });

  it('setApprovalForAll: approval_for_all (info), approval_to_eoa for an EOA operator, nothing when revoking', () => {
    expect(run({ to: NFT, data: enc('setApprovalForAll', [CONTRACT, true]) })).toEqual(['info:approval_for_all']);
    expect(run({ to: NFT, data: enc('setApprovalForAll', [EOA, true]) })).toEqual(['warn:approval_to_eoa', 'info:approval_for_all']);
    expect(run({ to: NFT, data: enc('setApprovalForAll', [EOA, false]) })).toEqual([]);
  });

  it('an ERC-721 approve(to, tokenId) is not an allowance amount', () => {
    expect(run({ to: NFT, data: enc('approve', [CONTRACT, maxUint256]) })).toEqual([]);
    expect(run({ to: NFT, data: enc('approve', [EOA, 5n]) })).toEqual(['warn:approval_to_eoa']);
  });
});

/**
 * Approvals granted inside a call the decoder cannot read (a smart wallet's execute, a batch):
 * the simulation's logs show them, and they are judged like decoded ones.
 */
describe('approvals seen only in the simulation logs', () => {
  const word = (v: bigint) => `0x${v.toString(16).padStart(64, '0')}` as Hex;
  const topic = (a: string) => `0x${a.slice(2).toLowerCase().padStart(64, '0')}` as Hex;
  const APPROVAL = '0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925' as Hex;
  const FOR_ALL = '0x17307eab39ab6107e8899845ad3d59bd9653f200f220920489ca2b5937696c31' as Hex;
  const P2_APPROVAL = '0xda9fa7c1b00402c17d0161b249b1ab8bbec047c5a52207b9c112deffd817036b' as Hex;
  const approvalLog = (token: Address, owner: Address, spender: Address, amount: bigint) => ({ address: token, topics: [APPROVAL, topic(owner), topic(spender)], data: word(amount) });
  const WALLET_CALL = '0xb61d27f6' as Hex; // execute(address,uint256,bytes): not decoded

  it('approvalsOf reads ERC-20 Approval, ApprovalForAll and Permit2 Approval of the sender only', () => {
    const logs = [
      approvalLog(USDC, SENDER, EOA, maxUint256),
      approvalLog(USDC, EOA, CONTRACT, maxUint256), // someone else's allowance
      { address: NFT, topics: [FOR_ALL, topic(SENDER), topic(EOA)], data: word(1n) },
      { address: PERMIT2_ADDRESS, topics: [P2_APPROVAL, topic(SENDER), topic(TOKEN), topic(CONTRACT)], data: `${word(maxUint160)}${word(1n).slice(2)}` as Hex },
      { address: TOKEN, topics: [APPROVAL, topic(SENDER), topic(EOA), word(7n)], data: '0x' as Hex }, // ERC-721 Approval(tokenId): no allowance
    ];
    expect(approvalsOf(logs, SENDER)).toEqual([
      { kind: 'approve', path: 'log:0', token: USDC, owner: SENDER, spender: EOA, amount: maxUint256, via: 'log:Approval', deadline: null },
      { kind: 'approve-all', path: 'log:2', token: NFT, owner: SENDER, operator: EOA, approved: true, via: 'log:ApprovalForAll' },
      { kind: 'approve', path: 'log:3', token: TOKEN, owner: SENDER, spender: CONTRACT, amount: maxUint160, via: 'log:permit2.approve', deadline: null },
    ]);
  });

  it('an unlimited allowance to an EOA granted through an undecoded call: approval_unlimited and approval_to_eoa', () => {
    const logApprovals = approvalsOf([approvalLog(USDC, SENDER, EOA, maxUint256)], SENDER);
    expect(run({ to: CONTRACT, data: WALLET_CALL, logApprovals })).toEqual(['warn:approval_unlimited', 'warn:approval_to_eoa']);
    expect(verdictOf(findingsOf(evidence({ to: CONTRACT, data: WALLET_CALL, logApprovals }), NOW), evidence({ to: CONTRACT, data: WALLET_CALL, logApprovals })).decision).toBe('WARN');
    const all = approvalsOf([{ address: NFT, topics: [FOR_ALL, topic(SENDER), topic(EOA)], data: word(1n) }], SENDER);
    expect(run({ to: CONTRACT, data: WALLET_CALL, logApprovals: all })).toEqual(['warn:approval_to_eoa', 'info:approval_for_all']);
  });

  it('a decoded approve and its own Approval log are judged once', () => {
    const data = enc('approve', [EOA, maxUint256]);
    const decoded = decodeCalldata(USDC, data, SENDER);
    const logApprovals = undecodedApprovals(approvalsOf([approvalLog(USDC, SENDER, EOA, maxUint256)], SENDER), decoded);
    expect(logApprovals).toEqual([]);
    expect(run({ data, logApprovals })).toEqual(['warn:approval_unlimited', 'warn:approval_to_eoa']);
    // Another spender in the logs than in the calldata is a second approval.
    expect(undecodedApprovals(approvalsOf([approvalLog(USDC, SENDER, CONTRACT, 5n)], SENDER), decoded)).toHaveLength(1);
  });
});
