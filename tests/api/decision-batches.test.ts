import { generateKeyPairSync } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DecisionService, type DecisionOutcome } from '../../src/features/spend-policy/decisions.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import type { PolicyRules } from '../../src/features/spend-policy/protected-schemas.js';
import { GroupCommitter } from '../../src/platform/db/group-commit.js';
import { AppError } from '../../src/platform/errors.js';
import { hashKey } from '../../src/platform/keys.js';
import { ReceiptSigner } from '../../src/platform/receipts.js';
import { ADDR } from '../helpers/app.js';
import { createTestDatabase, testDialect } from '../helpers/db.js';
import { suiteFixture } from '../helpers/suite.js';

// Decision requests that arrive together are decided in one batch: one read of what they need,
// the decisions made in order in memory, one write. Requests queued in one tick always share a
// batch, so these tests see exactly what a request inside a batch sees.

const NOW = new Date('2026-01-15T12:00:00.000Z');
const NEXT_DAY = new Date('2026-01-16T00:00:00.000Z');

const fixture = suiteFixture(async () => {
  const database = await createTestDatabase();
  const signer = ReceiptSigner.fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
  const service = new DecisionService(database, signer, 3600);
  return { database, service, store: new PolicyStore(database), close: () => database.drop() };
});

async function policy(rules: Partial<PolicyRules> = {}) {
  const { row, agentKey } = await fixture.store.create(
    {
      name: 'batch',
      agentId: 'agent-1',
      policy: {
        maxPerTransaction: '10',
        dailyBudget: '5',
        requireHumanAbove: '10',
        maxRepeats: 2,
        allowedRecipients: [ADDR.alice, ADDR.bob],
        blockUnknownRecipients: true,
        ...rules,
      },
    },
    NOW,
  );
  const key = { kind: 'agent' as const, hash: hashKey(agentKey) };
  const decide = (requestId: string, amount: string, recipient: string = ADDR.alice, now = NOW, agentId = 'agent-1') =>
    fixture.service.decide({ policyId: row.id, requestId, agentId, chain: 'base', asset: 'USDC', recipient, amount }, key, now);
  return { id: row.id, key, decide };
}

/** Settles every promise, keeping each value or the AppError code it failed with. */
async function settle(promises: Array<Promise<DecisionOutcome>>) {
  return (await Promise.allSettled(promises)).map((r) => {
    if (r.status === 'fulfilled') return r.value;
    if (r.reason instanceof AppError) return r.reason.code;
    throw r.reason;
  });
}

const verdict = (o: DecisionOutcome | string) => (typeof o === 'string' ? o : `${o.decision.decision} ${o.decision.reasons.join(',')}`.trim());

async function spent(policyId: string, day: string) {
  const row = await fixture.database.db.selectFrom('policy_day_spend').select('spent_micro').where('policy_id', '=', policyId).where('day', '=', day).executeTakeFirst();
  return row ? BigInt(row.spent_micro) : 0n;
}

describe('decisions decided together in one batch', () => {
  const commits = vi.spyOn(GroupCommitter.prototype as unknown as { commit(batch: unknown[]): Promise<void> }, 'commit');
  afterEach(() => {
    commits.mockClear();
  });

  it('count the budget and repeats spent by the earlier requests of the batch, per UTC day', async () => {
    const p = await policy();
    const outcomes = await settle([
      p.decide('r1', '1'),
      p.decide('r2', '1', ADDR.alice.toUpperCase().replace('0X', '0x')),
      p.decide('r3', '1'),
      p.decide('r4', '2', ADDR.bob),
      p.decide('r5', '2', ADDR.bob),
      p.decide('r6', '1', ADDR.bob),
      p.decide('r7', '0.000001', ADDR.bob),
      p.decide('r8', '1', ADDR.alice, NEXT_DAY),
    ]);
    expect(commits).toHaveBeenCalledTimes(1);
    expect(outcomes.map(verdict)).toEqual([
      'APPROVE',
      'APPROVE',
      // the third 1 USDC to alice today, with maxRepeats 2 (the second was in other letter case)
      'BLOCK repeat_limit_reached',
      'APPROVE',
      // 1 + 1 + 2 spent; 2 more would make 6 of 5
      'BLOCK exceeds_daily_budget',
      'APPROVE',
      'BLOCK exceeds_daily_budget',
      // a new UTC day, a new budget
      'APPROVE',
    ]);
    expect(await spent(p.id, '2026-01-15')).toBe(5_000_000n);
    expect(await spent(p.id, '2026-01-16')).toBe(1_000_000n);

    // The next batch starts from what this one stored.
    expect((await settle([p.decide('r9', '0.000001', ADDR.bob)])).map(verdict)).toEqual(['BLOCK exceeds_daily_budget']);
    expect((await settle([p.decide('r10', '1', ADDR.alice, NEXT_DAY)])).map(verdict)).toEqual(['APPROVE']);
    expect((await settle([p.decide('r11', '1', ADDR.alice, NEXT_DAY)])).map(verdict)).toEqual(['BLOCK repeat_limit_reached']);
  });

  it('read the repeat count of each amount, and the budget of each day, even where they share a read', async () => {
    // Stored by earlier batches: alice's 2 USDC has used both repeats today, and tomorrow's
    // budget is spent already (a request of tomorrow came first).
    const p = await policy({ dailyBudget: '10', maxRepeats: 2 });
    expect((await settle([p.decide('e1', '2'), p.decide('e2', '2')])).map(verdict)).toEqual(['APPROVE', 'APPROVE']);
    expect((await settle([p.decide('e3', '10', ADDR.bob, NEXT_DAY)])).map(verdict)).toEqual(['APPROVE']);
    commits.mockClear();
    const outcomes = await settle([
      // 1 USDC to alice, never sent before; then 2 USDC to alice, which has no repeat left.
      p.decide('b1', '1'),
      p.decide('b2', '2'),
      // 0.5 to bob today (nothing of bob's today), then the same tomorrow, whose budget is spent.
      p.decide('b3', '0.5', ADDR.bob),
      p.decide('b4', '0.5', ADDR.bob, NEXT_DAY),
    ]);
    expect(commits).toHaveBeenCalledTimes(1);
    expect(outcomes.map(verdict)).toEqual(['APPROVE', 'BLOCK repeat_limit_reached', 'APPROVE', 'BLOCK exceeds_daily_budget']);
    expect(await spent(p.id, '2026-01-15')).toBe(5_500_000n);
    expect(await spent(p.id, '2026-01-16')).toBe(10_000_000n);
  });

  const batchSizes = () => commits.mock.calls.map(([batch]) => batch.length);

  // SQLite decides a whole batch without leaving the event loop, so a batch waits a few turns
  // for the requests still arriving; on PostgreSQL they arrive during its round trips anyway.
  it.runIf(testDialect === 'sqlite')('take in the requests that keep arriving in the next event-loop turns', async () => {
    const p = await policy({ dailyBudget: '100' });
    const pending = [p.decide('t1', '1', ADDR.alice)];
    for (const id of ['t2', 't3', 't4']) {
      await nextTurn();
      pending.push(p.decide(id, '1', ADDR.bob));
    }
    const outcomes = await settle(pending);
    expect(batchSizes()).toEqual([4]);
    // still decided in order: bob's third 1 USDC today goes past maxRepeats 2
    expect(outcomes.map(verdict)).toEqual(['APPROVE', 'APPROVE', 'APPROVE', 'BLOCK repeat_limit_reached']);
  });

  it('commit at once when a turn brings no other request', async () => {
    const p = await policy();
    const first = p.decide('q1', '1');
    await nextTurn();
    await nextTurn();
    await nextTurn();
    const second = p.decide('q2', '1');
    expect((await settle([first, second])).map(verdict)).toEqual(['APPROVE', 'APPROVE']);
    expect(batchSizes()).toEqual([1, 1]);
  });

  it('answer a repeated requestId with the decision made earlier in the batch, and refuse it with other content', async () => {
    const p = await policy();
    const outcomes = await settle([p.decide('same', '2'), p.decide('same', '2'), p.decide('same', '3'), p.decide('other', '2')]);
    expect(commits).toHaveBeenCalledTimes(1);
    const [first, retry, changed, other] = outcomes;
    if (typeof first !== 'object' || typeof retry !== 'object' || typeof other !== 'object') throw new Error(`expected decisions: ${outcomes.map(verdict)}`);
    expect(first.replayed).toBe(false);
    expect(retry.replayed).toBe(true);
    expect(retry.decision).toEqual(first.decision);
    expect(retry.receipt).toEqual(first.receipt);
    expect(changed).toBe('request_id_conflict');
    expect(verdict(other)).toBe('APPROVE');
    // Spent once for "same" and once for "other"; two rows stored.
    expect(await spent(p.id, '2026-01-15')).toBe(4_000_000n);
    const rows = await fixture.database.db.selectFrom('decisions').select(['request_id', 'receipt']).where('policy_id', '=', p.id).execute();
    expect(rows.map((r) => r.request_id).sort()).toEqual(['other', 'same']);
    // Stored without its signature, which is computed again (the same) when read.
    const { signature, ...unsigned } = first.receipt;
    expect(signature).toMatch(/^[A-Za-z0-9_-]{86}$/);
    expect(JSON.parse(rows.find((r) => r.request_id === 'same')!.receipt)).toEqual(unsigned);
  });

  it('answer requestIds stored by an earlier batch from storage, also when the batch reads their policy and totals once', async () => {
    const p = await policy({ dailyBudget: '100', maxRepeats: 10 });
    const [stored] = await settle([p.decide('s1', '1')]);
    if (typeof stored !== 'object') throw new Error(`expected a decision: ${stored}`);
    // All four name the same policy, day, recipient and amount: one read of the policy row and
    // totals serves them, and each still looks up its own requestId.
    const outcomes = await settle([p.decide('n1', '1'), p.decide('s1', '1'), p.decide('s1', '1', ADDR.alice, NOW, 'agent-2'), p.decide('n2', '1')]);
    expect(commits).toHaveBeenCalledTimes(2);
    const [n1, replay, changed, n2] = outcomes;
    if (typeof n1 !== 'object' || typeof replay !== 'object' || typeof n2 !== 'object') throw new Error(`expected decisions: ${outcomes.map(verdict)}`);
    expect(replay.replayed).toBe(true);
    expect(replay.decision).toEqual(stored.decision);
    expect(changed).toBe('request_id_conflict');
    expect([n1.replayed, n2.replayed]).toEqual([false, false]);
    // s1 spent once, in the first batch; n1 and n2 once each.
    expect(await spent(p.id, '2026-01-15')).toBe(3_000_000n);
  });

  it('fail a request alone with its 4xx, and store the others of the batch', async () => {
    const p = await policy();
    const q = await policy();
    const wrongKey = fixture.service.decide(
      { policyId: q.id, requestId: 'k', agentId: 'agent-1', chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount: '1' },
      p.key,
      NOW,
    );
    const unknown = fixture.service.decide(
      { policyId: 'sgp_00000000000000000000000000000000', requestId: 'u', agentId: 'agent-1', chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount: '1' },
      p.key,
      NOW,
    );
    const outcomes = await settle([p.decide('a', '1'), p.decide('b', '1', ADDR.alice, NOW, 'someone-else'), wrongKey, unknown, q.decide('c', '1'), p.decide('d', '2')]);
    expect(outcomes.map(verdict)).toEqual(['APPROVE', 'agent_mismatch', 'not_found', 'not_found', 'APPROVE', 'APPROVE']);
    expect(await spent(p.id, '2026-01-15')).toBe(3_000_000n);
    expect(await spent(q.id, '2026-01-15')).toBe(1_000_000n);
  });

  it('fail a job of writes.run alone with its 4xx (an approval refused, say), and store the decisions of its batch', async () => {
    const p = await policy();
    // queued in one tick: a decision, a job that fails with a 4xx before writing, another decision
    const first = p.decide('y1', '1');
    const refused = fixture.service.writes.run([p.id], async () => {
      throw new AppError('approval_conflict', 'the decision is not waiting for approval');
    });
    const last = p.decide('y2', '2');
    const outcomes = await settle([first, refused as Promise<never>, last]);
    expect(commits).toHaveBeenCalledTimes(1);
    expect(outcomes.map(verdict)).toEqual(['APPROVE', 'approval_conflict', 'APPROVE']);
    expect(await spent(p.id, '2026-01-15')).toBe(3_000_000n);
  });

  it('fail every request of the batch, and store none of it, when a job fails with anything but a 4xx', async () => {
    const p = await policy();
    const broken = new Error('disk on fire');
    // queued in one tick: a decision, a job that writes and then fails, another decision
    const first = p.decide('x1', '1');
    const failing = fixture.service.writes.run([p.id], async (tx) => {
      await tx.updateTable('policies').set({ name: 'half-written' }).where('id', '=', p.id).execute();
      throw broken;
    });
    const last = p.decide('x2', '1');
    const hung = new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 5_000).unref());
    const outcomes = await Promise.all(
      [first, failing, last].map((job) =>
        Promise.race([job.then(() => 'resolved', (err: unknown) => (err === broken ? 'rejected' : `rejected with ${String(err)}`)), hung]),
      ),
    );
    expect(commits).toHaveBeenCalledTimes(1);
    expect(outcomes).toEqual(['rejected', 'rejected', 'rejected']);
    // Rolled back as a whole: neither decision, nor the failed job's write, nor any spend.
    expect(await fixture.database.db.selectFrom('decisions').select('id').where('policy_id', '=', p.id).execute()).toEqual([]);
    expect(await spent(p.id, '2026-01-15')).toBe(0n);
    const row = await fixture.database.db.selectFrom('policies').select('name').where('id', '=', p.id).executeTakeFirstOrThrow();
    expect(row.name).toBe('batch');
    // The next batch works as usual.
    expect((await settle([p.decide('x1', '1')])).map(verdict)).toEqual(['APPROVE']);
  });

  it('write the decisions before a job queued after them reads the totals (approvals, evidence chains)', async () => {
    const p = await policy();
    const seen: bigint[] = [];
    const readTotals = fixture.service.writes.run([p.id], async (tx) => {
      const row = await tx.selectFrom('policy_day_spend').select('spent_micro').where('policy_id', '=', p.id).executeTakeFirst();
      seen.push(row ? BigInt(row.spent_micro) : 0n);
    });
    // queued in this order, in one tick: decide, read, decide
    const before = p.decide('before', '2');
    const reading = fixture.service.writes.run([p.id], async (tx) => {
      const row = await tx.selectFrom('policy_day_spend').select('spent_micro').where('policy_id', '=', p.id).executeTakeFirst();
      seen.push(row ? BigInt(row.spent_micro) : 0n);
    });
    const after = p.decide('after', '3');
    await Promise.all([readTotals, before, reading, after]);
    expect(commits).toHaveBeenCalledTimes(1);
    expect(seen).toEqual([0n, 2_000_000n]);
    expect(await spent(p.id, '2026-01-15')).toBe(5_000_000n);
  });
});
