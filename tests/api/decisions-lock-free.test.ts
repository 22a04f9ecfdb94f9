import { generateKeyPairSync } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DecisionService, type DecisionOutcome } from '../../src/features/spend-policy/decisions.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import type { Database } from '../../src/platform/db/database.js';
import { hashKey } from '../../src/platform/keys.js';
import { ReceiptSigner } from '../../src/platform/receipts.js';
import { ADDR } from '../helpers/app.js';
import { createTestDatabase, sharedDatabase, testDialect, type TestDatabase } from '../helpers/db.js';

// On PostgreSQL a batch of decisions is first decided from a read taken without the policies'
// locks, and stored only if, under the locks, everything it read is unchanged (migration 0008).
// Within one instance only a change to the policy itself can come in between; these tests also
// make another instance write at exactly that moment, and check that the batch is then decided
// again from what was stored meanwhile.

const NOW = new Date('2026-01-15T12:00:00.000Z');

type Hot = { writeManyIfUnchanged: (...args: unknown[]) => Promise<boolean> };

describe.skipIf(testDialect !== 'postgres')('PostgreSQL decisions without locks, with another instance writing', () => {
  let a: TestDatabase;
  let bDatabase: Database;
  let serviceA: DecisionService;
  let serviceB: DecisionService;
  let store: PolicyStore;

  beforeAll(async () => {
    a = await createTestDatabase();
    bDatabase = await sharedDatabase(a);
    const signer = ReceiptSigner.fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
    serviceA = new DecisionService(a, signer, 3600);
    serviceB = new DecisionService(bDatabase, signer, 3600);
    store = new PolicyStore(a);
  });
  afterAll(async () => {
    await bDatabase?.close();
    await a?.drop();
  });

  async function policy(dailyBudget = '1', maxRepeats = 100) {
    const { row, agentKey } = await store.create(
      {
        name: 'lock-free',
        agentId: 'agent-1',
        policy: { maxPerTransaction: '10', dailyBudget, requireHumanAbove: '10', maxRepeats, allowedRecipients: [ADDR.alice], blockUnknownRecipients: true },
      },
      NOW,
    );
    const key = { kind: 'agent' as const, hash: hashKey(agentKey) };
    const decide = (service: DecisionService, requestId: string, amount = '1') =>
      service.decide({ policyId: row.id, requestId, agentId: 'agent-1', chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount }, key, NOW);
    return { id: row.id, row, decide };
  }

  /** Runs `meanwhile` once, after instance A has decided its next batch and before it stores it. */
  function beforeAStores(meanwhile: () => Promise<unknown>) {
    const hot = (serviceA as unknown as { hot: Hot }).hot;
    const original = hot.writeManyIfUnchanged;
    hot.writeManyIfUnchanged = async (...args) => {
      hot.writeManyIfUnchanged = original;
      await meanwhile();
      return original(...args);
    };
  }

  const spent = async (policyId: string) =>
    (await sql<{ spent: string }>`select spent_micro::text as spent from policy_day_spend where policy_id = ${policyId}`.execute(a.db)).rows[0]?.spent;
  const verdict = (o: DecisionOutcome) => `${o.decision.decision} ${o.decision.reasons.join(',')}`.trim();

  it('stores a batch in two statements when nobody else wrote', async () => {
    const p = await policy('5');
    const before = { ...serviceA.writes.lockFree };
    const outcome = await p.decide(serviceA, 'quiet');
    expect(verdict(outcome)).toBe('APPROVE');
    expect(serviceA.writes.lockFree).toEqual({ batches: before.batches + 1, retried: before.retried });
    expect(await spent(p.id)).toBe('1000000');
  });

  it('decides again when another instance spent the budget in between: no overspend', async () => {
    const p = await policy('1');
    let fromB: DecisionOutcome | undefined;
    beforeAStores(async () => (fromB = await p.decide(serviceB, 'from-b')));
    const retriedBefore = serviceA.writes.lockFree.retried;
    const fromA = await p.decide(serviceA, 'from-a');
    expect(verdict(fromB!)).toBe('APPROVE');
    // A read a budget of 1 left and would have approved; under the locks it finds none left.
    expect(verdict(fromA)).toBe('BLOCK exceeds_daily_budget');
    expect(serviceA.writes.lockFree.retried).toBe(retriedBefore + 1);
    expect(await spent(p.id)).toBe('1000000');
  });

  it('decides again when another instance used the last repeat in between, even one that spent nothing', async () => {
    // A 0 USDC APPROVE leaves the day's spend as it was (stored already, by an earlier 1 USDC):
    // only the repeat count shows it.
    const p = await policy('5', 1);
    expect(verdict(await p.decide(serviceA, 'seed', '1'))).toBe('APPROVE');
    let fromB: DecisionOutcome | undefined;
    beforeAStores(async () => (fromB = await p.decide(serviceB, 'zero-b', '0')));
    const retriedBefore = serviceA.writes.lockFree.retried;
    const fromA = await p.decide(serviceA, 'zero-a', '0');
    expect(verdict(fromB!)).toBe('APPROVE');
    expect(verdict(fromA)).toBe('BLOCK repeat_limit_reached');
    expect(serviceA.writes.lockFree.retried).toBe(retriedBefore + 1);
    expect(await spent(p.id)).toBe('1000000');
  });

  it('answers the other instance’s decision when it stored the same requestId in between', async () => {
    const p = await policy('5');
    let fromB: DecisionOutcome | undefined;
    beforeAStores(async () => (fromB = await p.decide(serviceB, 'same')));
    const fromA = await p.decide(serviceA, 'same');
    expect(fromA.replayed).toBe(true);
    expect(fromA.decision.decisionId).toBe(fromB!.decision.decisionId);
    expect(await spent(p.id)).toBe('1000000');
  });

  it('decides again from the new policy when it changed in between', async () => {
    const p = await policy('5');
    const lowered = { maxPerTransaction: '0.5', dailyBudget: '5', requireHumanAbove: '10', maxRepeats: 100, allowedRecipients: [ADDR.alice], blockUnknownRecipients: true };
    beforeAStores(() => store.replace(p.row, { policy: lowered }, undefined, NOW));
    const outcome = await p.decide(serviceA, 'after-change');
    expect(verdict(outcome)).toBe('BLOCK exceeds_max_per_transaction');
    expect(outcome.decision.policyRevision).toBe(2);
    expect(await spent(p.id)).toBeUndefined();
  });

  it('waits for another instance that holds the lock, and decides from what it committed', async () => {
    const p = await policy('1');
    let committed: Promise<void> | undefined;
    beforeAStores(async () => {
      let locked!: () => void;
      const lockHeld = new Promise<void>((resolve) => (locked = resolve));
      // What the other instance's batch does: lock the policy, spend the whole budget, commit a
      // moment later. Instance A's check must wait for the lock and then see the spend.
      committed = bDatabase.db.transaction().execute(async (tx) => {
        await sql`select id from policies where id = ${p.id} for update`.execute(tx);
        locked();
        await new Promise((resolve) => setTimeout(resolve, 300));
        await sql`insert into policy_day_spend (policy_id, day, spent_micro) values (${p.id}, '2026-01-15', 1000000)`.execute(tx);
      });
      await lockHeld;
    });
    const outcome = await p.decide(serviceA, 'waits');
    await committed;
    expect(verdict(outcome)).toBe('BLOCK exceeds_daily_budget');
    expect(await spent(p.id)).toBe('1000000');
  });
});
