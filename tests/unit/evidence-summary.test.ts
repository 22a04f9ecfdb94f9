import { encodeFunctionData, parseAbi } from 'viem';
import { describe, expect, it } from 'vitest';
import type { ChainEvent, Intent } from '../../src/features/evidence/hashing.js';
import { LIMITATIONS, checkAgainstIntent, summarise } from '../../src/features/evidence/summary.js';
import { USDC_ADDRESS } from '../../src/platform/prices.js';

const BOB = '0x2222222222222222222222222222222222222222';
const ALICE = '0x1111111111111111111111111111111111111111';
const intent: Intent = { policyId: `sgp_${'a'.repeat(32)}`, agentId: 'a', requestId: 'r', chain: 'base', asset: 'USDC', recipient: BOB, amount: '1.5' };
const ev = (sequence: number, eventType: ChainEvent['eventType'], body: Record<string, unknown>): ChainEvent => ({
  evidenceId: `ev_${sequence}`,
  sequence,
  eventType,
  body,
  createdAt: '2026-01-15T12:00:00.000Z',
  prevHash: 'sha256:p',
  hash: 'sha256:h',
});
const decision = { decisionId: 'dec_1', decision: 'APPROVE', reasons: [], policyRevision: 2, approval: null };
const chain = (events: ChainEvent[]) => ({ evidenceChainId: 'ec_1', intent, intentDigest: 'sha256:i', events });

describe('summarise', () => {
  it('says that a MATCH names no payer only when the intent names none', () => {
    const events = [ev(1, 'PRECHECK_COMPLETED', { decision })];
    expect(summarise(chain(events)).limitations).toContain(LIMITATIONS.anyPayer);
    expect(summarise({ ...chain(events), intent: { ...intent, expectedFrom: ALICE } }).limitations).not.toContain(LIMITATIONS.anyPayer);
  });

  it('a fresh chain: pre-authorization only, NOT_SUBMITTED, the standing limitations', () => {
    const s = summarise(chain([ev(1, 'PRECHECK_COMPLETED', { decision, receipt: { receiptId: 'rcpt_1' } })]));
    expect(s).toEqual({
      evidenceChainId: 'ec_1',
      intentDigest: 'sha256:i',
      preAuthorization: { evidenceId: 'ev_1', decisionId: 'dec_1', decision: 'APPROVE', reasons: [], policyRevision: 2, approval: null, receiptId: 'rcpt_1', executionAuthorized: false },
      transactionPreflight: null,
      settlement: null,
      reconciliation: 'NOT_SUBMITTED',
      limitations: [LIMITATIONS.unknown, LIMITATIONS.match, LIMITATIONS.nothingExecuted, LIMITATIONS.notSubmitted, LIMITATIONS.noPreflight, LIMITATIONS.anyPayer],
      executionAuthorized: false,
    });
  });

  it('reports the latest settlement and the preflight verdict', () => {
    const s = summarise(
      chain([
        ev(1, 'PRECHECK_COMPLETED', { decision }),
        ev(2, 'TRANSACTION_PREFLIGHT_COMPLETED', { inputDigest: 'sha256:in', report: { verdict: { decision: 'ALLOW' } }, intentCheck: { match: true } }),
        ev(3, 'SETTLEMENT_RECONCILED', { txHash: '0x1', result: 'UNKNOWN', reason: 'x', mismatches: [], confirmations: 0, requiredConfirmations: 1, checkedAt: 't' }),
        ev(4, 'SETTLEMENT_RECONCILED', { txHash: '0x2', result: 'MATCH', reason: 'y', mismatches: [], confirmations: 1, requiredConfirmations: 1, checkedAt: 't' }),
      ]),
    );
    expect(s.reconciliation).toBe('MATCH');
    expect(s.settlement).toMatchObject({ evidenceId: 'ev_4', txHash: '0x2', result: 'MATCH' });
    expect(s.transactionPreflight).toEqual({ evidenceId: 'ev_2', inputDigest: 'sha256:in', verdict: { decision: 'ALLOW' }, intentCheck: { match: true } });
    expect(s.limitations).toContain(LIMITATIONS.preflightInput);
    expect(s.limitations).not.toContain(LIMITATIONS.notSubmitted);
    expect(s.limitations).not.toContain(LIMITATIONS.preflightNotIntent);
  });

  it('says so when the attached preflight is of a transaction that does not match the intent, whatever its verdict', () => {
    const preflight = (intentCheck: unknown) =>
      summarise(chain([ev(1, 'PRECHECK_COMPLETED', { decision }), ev(2, 'TRANSACTION_PREFLIGHT_COMPLETED', { inputDigest: 'sha256:in', report: { verdict: { decision: 'ALLOW' } }, intentCheck })]));
    const mismatches = [{ field: 'amount', expected: '2', observed: '12.5' }];
    expect(preflight({ kind: 'usdc-transfer', match: false, mismatches }).limitations).toContain(LIMITATIONS.preflightNotIntent);
    // Not a plain USDC transfer, or no sender to compare: match is null, and the standing line says to check.
    expect(preflight({ kind: 'other', match: null, mismatches: [] }).limitations).not.toContain(LIMITATIONS.preflightNotIntent);
  });

  it('an unapproved HUMAN_APPROVAL is a limitation; the current approval state wins over the recorded one', () => {
    const human = { ...decision, decision: 'HUMAN_APPROVAL', approval: { status: 'PENDING', expiresAt: 'e', approvedAt: null } };
    const events = [ev(1, 'PRECHECK_COMPLETED', { decision: human })];
    expect(summarise(chain(events)).limitations).toContain(LIMITATIONS.pendingApproval);
    const approved = summarise(chain(events), { status: 'ADMIN_APPROVED', expiresAt: 'e', approvedAt: 'a' });
    expect(approved.preAuthorization!.approval).toMatchObject({ status: 'ADMIN_APPROVED' });
    expect(approved.limitations).not.toContain(LIMITATIONS.pendingApproval);
  });
});

const transfer = (to: string, value: bigint) =>
  encodeFunctionData({ abi: parseAbi(['function transfer(address to, uint256 value) returns (bool)']), functionName: 'transfer', args: [to as `0x${string}`, value] });

describe('checkAgainstIntent', () => {
  it('a plain USDC transfer of the intent matches', () => {
    expect(checkAgainstIntent(intent, { to: USDC_ADDRESS.toLowerCase(), data: transfer(BOB, 1_500_000n) })).toEqual({ kind: 'usdc-transfer', match: true, mismatches: [] });
  });

  it('lists what differs', () => {
    const r = checkAgainstIntent({ ...intent, expectedFrom: ALICE }, { to: USDC_ADDRESS, from: BOB, data: transfer(ALICE, 2_000_000n) });
    expect(r.match).toBe(false);
    expect(r.mismatches).toEqual([
      { field: 'recipient', expected: '0x2222222222222222222222222222222222222222', observed: '0x1111111111111111111111111111111111111111' },
      { field: 'amount', expected: '1.5', observed: '2' },
      { field: 'expectedFrom', expected: ALICE, observed: BOB },
    ]);
  });

  it('an intent that names its payer is not confirmed by an input without a sender: match null, unless something else differs', () => {
    const named = { ...intent, expectedFrom: ALICE };
    expect(checkAgainstIntent(named, { to: USDC_ADDRESS, data: transfer(BOB, 1_500_000n) })).toEqual({ kind: 'usdc-transfer', match: null, mismatches: [] });
    expect(checkAgainstIntent(named, { to: USDC_ADDRESS, from: ALICE.toLowerCase(), data: transfer(BOB, 1_500_000n) }).match).toBe(true);
    expect(checkAgainstIntent(named, { to: USDC_ADDRESS, data: transfer(BOB, 2_000_000n) }).match).toBe(false);
  });

  it('reads calldata in upper-case hex as the same transfer, so its mismatches still show', () => {
    const upper = (hex: string) => `0x${hex.slice(2).toUpperCase()}`;
    expect(checkAgainstIntent(intent, { to: USDC_ADDRESS, data: upper(transfer(BOB, 1_500_000n)) })).toEqual({ kind: 'usdc-transfer', match: true, mismatches: [] });
    const wrong = checkAgainstIntent(intent, { to: USDC_ADDRESS, data: upper(transfer(ALICE, 2_000_000n)) });
    expect(wrong).toMatchObject({ kind: 'usdc-transfer', match: false });
    expect(wrong.mismatches.map((m) => m.field)).toEqual(['recipient', 'amount']);
  });

  it('anything else is "other" with match null: another contract, native value, other calldata', () => {
    for (const input of [{ to: BOB, data: transfer(BOB, 1_500_000n) }, { to: USDC_ADDRESS, valueWei: '1', data: transfer(BOB, 1_500_000n) }, { to: USDC_ADDRESS, data: '0x095ea7b3' }, { to: USDC_ADDRESS }]) {
      expect(checkAgainstIntent(intent, input)).toEqual({ kind: 'other', match: null, mismatches: [] });
    }
  });
});
