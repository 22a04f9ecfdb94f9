import { describe, expect, it } from 'vitest';
import { getAddress, type Address, type Hex } from 'viem';
import { findingsOf, looksAlike, recipientsOf, type Finding } from '../../src/features/preflight/findings.js';
import { DEAD_ADDRESS, NATIVE_TOKEN, USDC } from '../../src/features/preflight/known.js';
import type { DecodedRevert } from '../../src/features/preflight/revert.js';
import type { DelegateCall } from '../../src/features/preflight/trace.js';
import { verdictOf } from '../../src/features/preflight/verdict.js';
import { CONTRACT, EOA, NFT, NOW, SENDER, TOKEN, codes, enc, evidence, move, reverted, run } from '../helpers/preflight-evidence.js';

describe('call trace', () => {
  const dc = (d: Partial<DelegateCall>): DelegateCall => ({ context: CONTRACT, target: TOKEN, selector: '0x12345678', forwarding: false, selfCall: false, inSenderContext: false, reverted: false, ...d });
  const withTrace = (delegatecalls: DelegateCall[]) => ({ to: CONTRACT, data: '0x12345678' as Hex, trace: { delegatecalls, topLevelSubcalls: 1, frames: 2 } });

  it('delegatecall_in_trace for borrowed code, saying when it runs as the sender', () => {
    const f = findingsOf(evidence(withTrace([dc({})])), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'delegatecall_in_trace', severity: 'warn', evidence: { inSenderContext: false, delegatecalls: [{ context: CONTRACT, target: TOKEN, selector: '0x12345678', reverted: false }] } })]);
    const mine = findingsOf(evidence(withTrace([dc({ context: SENDER, inSenderContext: true })])), NOW);
    expect(mine[0]!.message).toMatch(/sender's own account/);
    expect(mine[0]!.evidence.inSenderContext).toBe(true);
  });

  it('a forwarding proxy is proxy_destination (info); a self-delegatecall (multicall) is nothing', () => {
    expect(run(withTrace([dc({ forwarding: true })]))).toEqual(['info:proxy_destination']);
    expect(run(withTrace([dc({ selfCall: true, target: CONTRACT })]))).toEqual([]);
    expect(run(withTrace([dc({ forwarding: true, context: TOKEN })]))).toEqual([]);
  });

  it('trace_unavailable (info) when the node gave no trace, and confidence drops', () => {
    const e = evidence({ trace: null });
    expect(codes(findingsOf(e, NOW))).toEqual(['info:trace_unavailable']);
    expect(verdictOf(findingsOf(e, NOW), e).confidence).toBe('medium');
    expect(run({ trace: null, simulation: { ran: false, success: null, unavailable: 'x' } })).toEqual(['info:simulation_unavailable']);
  });
});

describe('USDC leaving the sender', () => {
  const viaContract = { to: CONTRACT, data: '0x12345678' as Hex };
  it('usdc_outflow_without_return when USDC leaves through a contract and nothing comes back', () => {
    const f = findingsOf(evidence({ ...viaContract, movements: [move(USDC, SENDER, EOA, 5_000_000n), move(USDC, SENDER, CONTRACT, 1n)] }), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'usdc_outflow_without_return', severity: 'warn', evidence: { amountMicro: '5000001', returnedMicro: '0', recipients: [EOA, CONTRACT] } })]);
  });

  it('even the smallest outflow (1 micro-USDC) counts', () => {
    expect(run({ ...viaContract, movements: [move(USDC, SENDER, CONTRACT, 1n)] })).toEqual(['warn:usdc_outflow_without_return']);
  });

  it('not when anything comes back, not for a direct USDC transfer, not for other tokens', () => {
    expect(run({ ...viaContract, movements: [move(USDC, SENDER, CONTRACT, 5n), move(TOKEN, CONTRACT, SENDER, 1n)] })).toEqual([]);
    expect(run({ ...viaContract, movements: [move(USDC, SENDER, CONTRACT, 5n), move(NATIVE_TOKEN, CONTRACT, SENDER, 1n, 'native')] })).toEqual([]);
    expect(run({ movements: [move(USDC, SENDER, EOA, 1_000_000n)] })).toEqual([]);
    expect(run({ ...viaContract, movements: [move(TOKEN, SENDER, EOA, 5n)] })).toEqual([]);
  });

  it('USDC coming back counts at face value: a partial refund does not hide the outflow', () => {
    const f = findingsOf(evidence({ ...viaContract, movements: [move(USDC, SENDER, CONTRACT, 100_000_000n), move(USDC, CONTRACT, SENDER, 1n)] }), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'usdc_outflow_without_return', severity: 'warn', evidence: { amountMicro: '100000000', returnedMicro: '1', recipients: [CONTRACT] } })]);
    expect(f[0]!.message).toMatch(/only part of it comes back/);
    expect(run({ ...viaContract, movements: [move(USDC, SENDER, CONTRACT, 5n), move(USDC, CONTRACT, SENDER, 5n)] })).toEqual([]);
    expect(run({ ...viaContract, movements: [move(USDC, SENDER, CONTRACT, 5n), move(USDC, CONTRACT, SENDER, 1n), move(TOKEN, CONTRACT, SENDER, 1n)] })).toEqual([]);
  });

  it('the sender paying itself is neither an outflow nor something coming back', () => {
    expect(run({ ...viaContract, movements: [move(USDC, SENDER, SENDER, 5n)] })).toEqual([]);
    const f = findingsOf(evidence({ ...viaContract, movements: [move(USDC, SENDER, CONTRACT, 5n), move(USDC, SENDER, SENDER, 1n)] }), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'usdc_outflow_without_return', evidence: { amountMicro: '5', returnedMicro: '0', recipients: [CONTRACT] } })]);
  });
});

describe('address poisoning', () => {
  const PAYEE: Address = getAddress('0xabcd000000000000000000000000000000001234');

  it('looksAlike: same first and last 4 hex characters, different middle, any case', () => {
    const fake = '0xABCD5555555555555555555555555555555E1234';
    expect(looksAlike(fake, PAYEE)).toBe(true);
    expect(looksAlike(PAYEE.toLowerCase(), PAYEE)).toBe(false);
    expect(looksAlike('0xabce555555555555555555555555555555551234', PAYEE)).toBe(false);
    expect(looksAlike('0xabcd555555555555555555555555555555551235', PAYEE)).toBe(false);
    expect(looksAlike('0xabcd555555555555555555555555555555550234', PAYEE)).toBe(false);
  });

  it('recipient_address_poisoning (block) for a look-alike of a recent payee', () => {
    const fake = '0xabcd5555555555555555555555555555555e1234' as Address;
    const f = findingsOf(evidence({ data: enc('transfer', [fake, 1n]), counterparties: [PAYEE, EOA] }), NOW);
    expect(f).toEqual([expect.objectContaining({ code: 'recipient_address_poisoning', severity: 'block', evidence: { recipient: getAddress(fake), resembles: [PAYEE] } })]);
    expect(run({ data: enc('transfer', [PAYEE, 1n]), counterparties: [PAYEE] })).toEqual([]);
    expect(run({ data: enc('approve', [fake, 1n]), counterparties: [PAYEE], accounts: new Map() })).toEqual(['block:recipient_address_poisoning']);
  });

  it('a look-alike spender seen only in the simulation logs (an undecoded wallet call) is poisoning too', () => {
    const fake = '0xabcd5555555555555555555555555555555e1234' as Address;
    const logApprovals = [{ kind: 'approve' as const, path: 'log:0', token: USDC, owner: SENDER, spender: fake, amount: 5n, via: 'log:Approval', deadline: null }];
    expect(run({ to: CONTRACT, data: '0xb61d27f6', logApprovals, counterparties: [PAYEE] })).toEqual(['block:recipient_address_poisoning']);
  });

  it('a zero-value, data-less send (a test transaction) to a look-alike is poisoning too', () => {
    const fake = '0xabcd5555555555555555555555555555555e1234' as Address;
    expect(run({ to: fake, value: 0n, data: '0x', counterparties: [PAYEE], accounts: new Map() })).toEqual(['block:recipient_address_poisoning']);
  });

  it('not checked without counterparties; poisoning_check_unavailable when the read failed', () => {
    expect(run({ counterparties: null })).toEqual([]);
    const e = evidence({ counterparties: null, counterpartiesFailed: true });
    expect(codes(findingsOf(e, NOW))).toEqual(['info:poisoning_check_unavailable']);
    expect(verdictOf(findingsOf(e, NOW), e).confidence).toBe('medium');
  });

  it('recipientsOf: calldata recipients and spenders, the destination of value, and where the sender\'s assets go', () => {
    const e = evidence({ to: EOA, value: 1n, data: '0x', movements: [move(USDC, SENDER, CONTRACT, 1n), move(USDC, CONTRACT, TOKEN, 1n)] });
    expect(recipientsOf(e)).toEqual([EOA, CONTRACT]);
    expect(recipientsOf(evidence({ data: enc('approve', [CONTRACT, 1n]) }))).toEqual([CONTRACT]);
    // ETH sent along with a contract call goes to the destination too.
    expect(recipientsOf(evidence({ to: CONTRACT, value: 1n, data: '0x12345678' }))).toEqual([CONTRACT]);
    expect(recipientsOf(evidence({ to: CONTRACT, value: 0n, data: '0x12345678' }))).toEqual([]);
  });
});

describe('verdict', () => {
  const f = (severity: Finding['severity']): Finding => ({ code: 'x', severity, message: '', evidence: {} });
  const e = evidence();
  it('orders findings block, warn, info, keeping their order within a severity', () => {
    expect(run({ to: DEAD_ADDRESS, value: 1n, senderProvided: false, data: enc('transfer', [EOA, 1n]), simulation: reverted() })).toEqual([
      'block:transfer_to_burn_address', 'warn:simulation_reverted', 'warn:calldata_to_eoa', 'info:fresh_sender',
    ]);
  });

  it('scores BLOCK 80..100 and WARN 30..70, never crossing bands', () => {
    expect(verdictOf([f('block')], e)).toEqual({ decision: 'BLOCK', score: 80, confidence: 'high' });
    expect(verdictOf([f('block'), f('block'), f('warn'), f('info')], e).score).toBe(87);
    expect(verdictOf(Array(9).fill(f('block')), e).score).toBe(100);
    expect(verdictOf([f('warn')], e)).toEqual({ decision: 'WARN', score: 30, confidence: 'high' });
    expect(verdictOf([f('warn'), f('warn'), f('warn')], e).score).toBe(50);
    expect(verdictOf(Array(10).fill(f('warn')), e).score).toBe(70);
    expect(verdictOf([f('info')], e)).toEqual({ decision: 'ALLOW', score: 0, confidence: 'high' });
  });

  it('a static block or warn finding decides even without a simulation, with low confidence', () => {
    const none = evidence({ simulation: { ran: false, success: null, unavailable: 'x' } });
    expect(verdictOf([f('warn')], none)).toEqual({ decision: 'WARN', score: 30, confidence: 'low' });
    expect(verdictOf([f('block')], none)).toEqual({ decision: 'BLOCK', score: 80, confidence: 'low' });
  });

  it('confidence is medium for an unknown destination kind or a moved token with unknown decimals', () => {
    expect(verdictOf([], evidence({ accounts: new Map() })).confidence).toBe('medium');
    const other = '0x8888888888888888888888888888888888888888' as Address;
    expect(verdictOf([], evidence({ movements: [move(other, SENDER, EOA, 1n)] })).confidence).toBe('medium');
    expect(verdictOf([], evidence({ movements: [move(NATIVE_TOKEN, SENDER, EOA, 1n, 'native'), move(TOKEN, EOA, SENDER, 1n)] })).confidence).toBe('high');
    // An NFT has no decimals to read: moving one is no gap.
    expect(verdictOf([], evidence({ movements: [move(NFT, SENDER, EOA, 1n, 'erc721')] })).confidence).toBe('high');
  });
});

describe('a sender that cannot pay', () => {
  it('is insufficient_native_balance alone: the missing trace is the same failure, not a node gap', () => {
    const revert: DecodedRevert = { kind: 'insufficient-funds', reason: 'no ETH', selector: null, errorName: null, args: null };
    expect(run({ to: EOA, data: '0x', value: 10n, trace: null, simulation: { success: false, revert } })).toEqual(['block:insufficient_native_balance']);
  });
});
