import { describe, expect, it } from 'vitest';
import type { Intent } from '../../src/features/evidence/hashing.js';
import {
  MINED_BEFORE_MARGIN_MS,
  UNREADABLE_REASON,
  finalResultOf,
  planAfterReading,
  planBeforeReading,
  reconcileSettlement,
  type RecordedSettlement,
  type SettlementObservation,
} from '../../src/features/evidence/settlement.js';
import type { PaymentEvidence } from '../../src/features/reports/payment-proof.js';
import type { UsdcTransfer } from '../../src/features/reports/usdc-transfers.js';

const ALICE = '0x1111111111111111111111111111111111111111';
const BOB = '0x2222222222222222222222222222222222222222';
const CAROL = '0x3333333333333333333333333333333333333333';
const NOW = new Date('2026-01-15T12:00:00.000Z');
const intent: Intent = { policyId: `sgp_${'a'.repeat(32)}`, agentId: 'a', requestId: 'r', chain: 'base', asset: 'USDC', recipient: BOB, amount: '1.5', expectedFrom: ALICE };
const HASH = `0x${'ab'.repeat(32)}`;

const transfer = (from: string, to: string, micro: bigint): UsdcTransfer => ({
  from: from as `0x${string}`,
  to: to as `0x${string}`,
  amount: (Number(micro) / 1e6).toString(),
  amountMicro: micro,
  logIndex: 0,
});
const mined = (transfers: UsdcTransfer[], extra: Partial<PaymentEvidence> = {}) => ({
  evidence: { found: true, mined: true, status: 'success' as const, confirmations: 2, transfers, finality: 'latest' as const, ...extra },
  blockNumber: 100n,
});
/** The chain was created an hour before NOW. */
const CREATED = new Date(NOW.getTime() - 3_600_000);
const reconcile = (e: Parameters<typeof reconcileSettlement>[2], min = 1) =>
  reconcileSettlement(intent, HASH.toUpperCase().replace('0X', '0x'), e, min, NOW, CREATED);
const minedAt = (msAfterCreation: number) => new Date(CREATED.getTime() + msAfterCreation);

describe('reconcileSettlement', () => {
  it('MATCH: one transfer of the amount to the recipient from expectedFrom, deep enough', () => {
    expect(reconcile(mined([transfer(ALICE, BOB, 1_500_000n)]))).toEqual({
      txHash: HASH,
      result: 'MATCH',
      reason: 'USDC transfer of the expected amount to the expected recipient from the expected sender',
      mismatches: [],
      confirmations: 2,
      requiredConfirmations: 1,
      blockNumber: 100,
      minedAt: null,
      finality: 'latest',
      transfers: [{ from: ALICE, to: BOB, amount: '1.5', logIndex: 0 }],
      expected: { recipient: BOB, amount: '1.5', expectedFrom: ALICE },
      checkedAt: NOW.toISOString(),
    });
  });

  it('MISMATCH names the intent fields (recipient, amount, expectedFrom)', () => {
    const r = reconcile(mined([transfer(CAROL, ALICE, 1_000_000n)]));
    expect(r.result).toBe('MISMATCH');
    expect(r.mismatches.map((m) => m.field)).toEqual(['recipient', 'amount', 'expectedFrom']);
    expect(r.mismatches[1]).toEqual({ field: 'amount', expected: '1.5', observed: '1' });
    expect(reconcile(mined([])).mismatches).toEqual([]);
    expect(reconcile(mined([])).result).toBe('MISMATCH');
  });

  it('PENDING (unmined or shallow), FAILED (reverted), UNKNOWN (not found or unreadable)', () => {
    expect(reconcile({ evidence: { found: true, mined: false, confirmations: 0, transfers: [], finality: null }, blockNumber: null }).result).toBe('PENDING');
    expect(reconcile(mined([transfer(ALICE, BOB, 1_500_000n)], { confirmations: 1 }), 3)).toMatchObject({ result: 'PENDING', requiredConfirmations: 3, confirmations: 1 });
    expect(reconcile(mined([], { status: 'reverted' })).result).toBe('FAILED');
    expect(reconcile({ evidence: { found: false, mined: false, confirmations: 0, transfers: [], finality: null }, blockNumber: null }).result).toBe('UNKNOWN');
    expect(reconcile(null)).toMatchObject({ result: 'UNKNOWN', reason: UNREADABLE_REASON, confirmations: 0, blockNumber: null });
  });

  it('a transaction mined before the chain was created (beyond the clock margin) is MISMATCH of minedAt, never MATCH', () => {
    const paying = [transfer(ALICE, BOB, 1_500_000n)];
    const earliest = new Date(CREATED.getTime() - MINED_BEFORE_MARGIN_MS).toISOString();
    const early = reconcile({ ...mined(paying), minedAt: minedAt(-MINED_BEFORE_MARGIN_MS - 1000) });
    expect(early).toMatchObject({ result: 'MISMATCH', minedAt: minedAt(-MINED_BEFORE_MARGIN_MS - 1000).toISOString() });
    expect(early.reason).toMatch(/mined before this evidence chain was created/);
    expect(early.mismatches).toEqual([{ field: 'minedAt', expected: `at or after ${earliest}`, observed: minedAt(-MINED_BEFORE_MARGIN_MS - 1000).toISOString() }]);
    // A field mismatch too: both are listed, the transfer's own first.
    const both = reconcile({ ...mined([transfer(ALICE, BOB, 1n)]), minedAt: minedAt(-86_400_000) });
    expect(both.mismatches.map((m) => m.field)).toEqual(['amount', 'minedAt']);
    // ...and the reason stays the transfer's own: the payment differs whenever it was mined.
    expect(both.reason).toBe('no USDC transfer in the transaction matches the expected payment');
  });

  it('the clock margin is the documented 10 minutes (README), not more', () => {
    const paying = [transfer(ALICE, BOB, 1_500_000n)];
    expect(reconcile({ ...mined(paying), minedAt: minedAt(-10 * 60_000) }).result).toBe('MATCH');
    for (const minutes of [11, 30, 59]) {
      expect(reconcile({ ...mined(paying), minedAt: minedAt(-minutes * 60_000) }).result, `${minutes} min`).toBe('MISMATCH');
    }
  });

  it('a transaction mined after the chain, or within the clock margin before it, can MATCH', () => {
    const paying = [transfer(ALICE, BOB, 1_500_000n)];
    for (const at of [-MINED_BEFORE_MARGIN_MS, -1000, 0, 5000]) {
      expect(reconcile({ ...mined(paying), minedAt: minedAt(at) })).toMatchObject({ result: 'MATCH', mismatches: [], minedAt: minedAt(at).toISOString() });
    }
  });

  it('the mined time changes nothing but MATCH and MISMATCH: a shallow or reverted early transaction stays PENDING or FAILED', () => {
    const early = minedAt(-86_400_000);
    expect(reconcile({ ...mined([transfer(ALICE, BOB, 1_500_000n)], { confirmations: 1 }), minedAt: early }, 3).result).toBe('PENDING');
    expect(reconcile({ ...mined([], { status: 'reverted' }), minedAt: early }).result).toBe('FAILED');
  });
});

const recorded = (evidenceId: string, txHash: string, result: SettlementObservation['result'], confirmations = 1): RecordedSettlement => ({
  evidenceId,
  body: { txHash, result, reason: result, mismatches: [], confirmations },
});
const observed = (txHash: string, result: SettlementObservation['result'], confirmations = 1) =>
  ({ txHash, result, reason: result, mismatches: [], confirmations }) as unknown as SettlementObservation;
const H1 = `0x${'1'.repeat(64)}`;
const H2 = `0x${'2'.repeat(64)}`;

describe('settlement plans', () => {
  it('before reading: a final result replays the same hash; a MATCH refuses any other, a MISMATCH or FAILED lets it be read', () => {
    for (const result of ['MATCH', 'MISMATCH', 'FAILED'] as const) {
      expect(planBeforeReading(recorded('ev_1', H1, result), H1.toUpperCase().replace('0X', '0x'))).toMatchObject({ action: 'replay' });
      expect(planBeforeReading(recorded('ev_1', H1, result), H2)).toMatchObject({ action: result === 'MATCH' ? 'conflict' : 'observe' });
    }
    for (const result of ['PENDING', 'UNKNOWN'] as const) {
      expect(planBeforeReading(recorded('ev_1', H1, result), H1)).toEqual({ action: 'observe' });
      expect(planBeforeReading(recorded('ev_1', H1, result), H2)).toEqual({ action: 'observe' });
    }
    expect(planBeforeReading(undefined, H1)).toEqual({ action: 'observe' });
  });

  it('a transaction\'s final result is its answer even when another transaction was reconciled since', () => {
    const own = recorded('ev_1', H1, 'FAILED');
    const history = [own, recorded('ev_2', H2, 'UNKNOWN')];
    expect(finalResultOf(history, H1.toUpperCase().replace('0X', '0x'))).toEqual(own);
    // H1 is all digits, so the line above cannot tell letter case apart; a hash with letters can.
    const lettered = recorded('ev_3', HASH.toLowerCase(), 'MISMATCH');
    expect(finalResultOf([lettered, recorded('ev_4', H2, 'UNKNOWN')], HASH.toUpperCase().replace('0X', '0x'))).toEqual(lettered);
    expect(finalResultOf(history, H2)).toBeUndefined();
    expect(finalResultOf([recorded('ev_1', H1, 'PENDING')], H1)).toBeUndefined();
    expect(planBeforeReading(history[1], H1, own)).toEqual({ action: 'replay', recorded: own });
    expect(planAfterReading(history[1], 'ev_2', observed(H1, 'MATCH'), own)).toEqual({ action: 'replay', recorded: own });
  });

  it('after reading: the first submission appends', () => {
    expect(planAfterReading(undefined, undefined, observed(H1, 'UNKNOWN'))).toEqual({ action: 'append' });
  });

  it('after reading: another hash recorded meanwhile wins; this one is a conflict', () => {
    expect(planAfterReading(recorded('ev_1', H1, 'UNKNOWN'), undefined, observed(H2, 'MATCH'))).toMatchObject({ action: 'conflict' });
    expect(planAfterReading(recorded('ev_2', H1, 'PENDING'), 'ev_1', observed(H2, 'PENDING'))).toMatchObject({ action: 'conflict' });
    expect(planAfterReading(recorded('ev_1', H1, 'MATCH'), undefined, observed(H2, 'MATCH'))).toMatchObject({ action: 'conflict' });
  });

  it('after reading: a non-final result seen before may be replaced, by the same or another hash', () => {
    expect(planAfterReading(recorded('ev_1', H1, 'UNKNOWN'), 'ev_1', observed(H2, 'MATCH'))).toEqual({ action: 'append' });
    // Another hash reading exactly like the recorded one is still new evidence, never the old hash's replay.
    expect(planAfterReading(recorded('ev_1', H1, 'UNKNOWN'), 'ev_1', observed(H2, 'UNKNOWN'))).toEqual({ action: 'append' });
    expect(planAfterReading(recorded('ev_1', H1, 'PENDING', 1), 'ev_1', observed(H2, 'PENDING', 1))).toEqual({ action: 'append' });
    expect(planAfterReading(recorded('ev_1', H1, 'PENDING', 1), 'ev_1', observed(H1, 'PENDING', 2))).toEqual({ action: 'append' });
    expect(planAfterReading(recorded('ev_1', H1, 'PENDING', 1), 'ev_1', observed(H1, 'MATCH', 3))).toEqual({ action: 'append' });
  });

  it('after reading: an unchanged reading, or the same final result recorded meanwhile, appends nothing', () => {
    expect(planAfterReading(recorded('ev_1', H1, 'UNKNOWN'), 'ev_1', observed(H1, 'UNKNOWN'))).toMatchObject({ action: 'replay' });
    expect(planAfterReading(recorded('ev_1', H1, 'MATCH'), undefined, observed(H1, 'MATCH'))).toMatchObject({ action: 'replay' });
    expect(planAfterReading(recorded('ev_2', H1, 'UNKNOWN'), undefined, observed(H1, 'UNKNOWN'))).toMatchObject({ action: 'replay' });
  });

  it('after reading: the same hash with a changed reason (unreadable, then not found) is a new reading', () => {
    const unreadable: RecordedSettlement = { evidenceId: 'ev_1', body: { txHash: H1, result: 'UNKNOWN', reason: UNREADABLE_REASON, mismatches: [], confirmations: 0 } };
    const notFound = { ...observed(H1, 'UNKNOWN', 0), reason: 'transaction not found on Base' } as SettlementObservation;
    expect(planAfterReading(unreadable, 'ev_1', notFound)).toEqual({ action: 'append' });
  });

  it('before reading: a final result is replayed for its hash in any letter case', () => {
    const lower = HASH.toLowerCase();
    const upper = `0x${lower.slice(2).toUpperCase()}`;
    expect(planBeforeReading(recorded('ev_1', lower, 'MATCH'), upper)).toMatchObject({ action: 'replay' });
  });
});
