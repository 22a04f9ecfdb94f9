// An approval is judged when it holds its policy's lock, not when it arrived: one that waited
// for the lock past the approval's expiry must not approve what a read meanwhile showed (and
// signed) as EXPIRED. PostgreSQL only: there another instance can hold the lock while time
// passes (SQLite's one writer blocks the whole process instead).
import { sql, type RawBuilder } from 'kysely';
import { describe, expect, it } from 'vitest';
import { json, useTwoTestApps } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';
import { eventually } from '../helpers/paid.js';
import { expectProblem } from '../helpers/problems.js';
import { approve, bearer, createPolicy, decide, readDecision } from '../helpers/policies.js';

describe.skipIf(testDialect !== 'postgres')('an approval that waited for the policy lock', () => {
  const pair = useTwoTestApps();

  /** Runs `lock` in a transaction of instance b and holds it until release(); blocking() waits until it blocks someone. */
  async function holdLock(lock: RawBuilder<unknown>) {
    let release!: () => void;
    let holder!: (pid: number) => void;
    const holderPid = new Promise<number>((resolve) => (holder = resolve));
    const done = pair.b.database.db.transaction().execute(async (tx) => {
      await lock.execute(tx);
      holder((await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(tx)).rows[0]!.pid);
      await new Promise<void>((resolve) => (release = resolve));
    });
    const pid = await holderPid;
    return {
      blocking: () =>
        eventually(async () => {
          const { rows } = await sql<{ n: string }>`select count(*) as n from pg_stat_activity where ${pid} = any(pg_blocking_pids(pid))`.execute(pair.b.database.db);
          return Number(rows[0]!.n) > 0;
        }, 'a request waiting for the held lock'),
      release: async () => {
        release();
        await done;
      },
    };
  }

  /** A pending HUMAN_APPROVAL, with instance a's clock a second before its expiry. */
  async function pendingASecondBeforeExpiry() {
    const p = await createPolicy(pair.a, { dailyBudget: '50', maxPerTransaction: '50', requireHumanAbove: '20', maxRepeats: 10 });
    const pending = await decide(pair.a, p, { amount: '30' });
    const expiresAt = Date.parse(pending.decision.approval.expiresAt);
    pair.a.clock.set(new Date(expiresAt - 1000));
    return { p, id: pending.decision.decisionId as string, requestId: pending.decision.requestId as string, expiresAt };
  }

  it('past the expiry by the time it holds the lock: 410, and the decision reads EXPIRED', async () => {
    const { p, id, expiresAt } = await pendingASecondBeforeExpiry();

    // Another instance holds the policy's lock (as its batch of decisions would).
    const held = await holdLock(sql`select id from policies where id = ${p.policyId} for update`);
    const approving = approve(pair.a, id, p.adminKey); // arrives a second before the expiry
    await held.blocking();

    pair.a.clock.set(new Date(expiresAt + 1000));
    // A read meanwhile waits for the approval in flight (it has just expired), then agrees with it.
    const reading = readDecision(pair.a, id, bearer(p.agentKey));
    await new Promise((resolve) => setTimeout(resolve, 200));
    await held.release();
    expectProblem(await approving, 410, 'approval_expired');
    const meanwhile = json(await reading);
    expect(meanwhile.decision.approval.status).toBe('EXPIRED');
    expect(json(await readDecision(pair.a, id, bearer(p.agentKey))).decision.approval).toEqual(meanwhile.decision.approval);
  });

  it('judged just before the expiry but still committing: a read meanwhile waits and shows ADMIN_APPROVED, never a signed EXPIRED', async () => {
    const { p, id, expiresAt } = await pendingASecondBeforeExpiry();

    // Hold the decision's row, so that the approval, judged under the policy's lock, waits to
    // write it (as a slow commit would) while time passes the expiry.
    const held = await holdLock(sql`select id from decisions where id = ${id} for update`);
    const approving = approve(pair.a, id, p.adminKey);
    await held.blocking();
    pair.a.clock.set(new Date(expiresAt + 1000));
    const reading = readDecision(pair.a, id, bearer(p.agentKey));
    await new Promise((resolve) => setTimeout(resolve, 200));
    await held.release();
    const approved = json(await approving);
    expect(approved.decision.approval.status).toBe('ADMIN_APPROVED');
    const read = json(await reading);
    expect(read.decision.approval).toEqual(approved.decision.approval);
  });

  it('judged just before the expiry but still committing: a replay of the request on another instance waits and shows ADMIN_APPROVED', async () => {
    const { p, id, requestId, expiresAt } = await pendingASecondBeforeExpiry();
    const held = await holdLock(sql`select id from decisions where id = ${id} for update`);
    const approving = approve(pair.a, id, p.adminKey);
    await held.blocking();
    // Instance b answers a replay from a read taken without the policy's lock: it must not sign
    // EXPIRED while a's approval, judged in time, is still committing.
    pair.b.clock.set(new Date(expiresAt + 1000));
    const replaying = decide(pair.b, p, { requestId, amount: '30' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await held.release();
    const approved = json(await approving);
    expect(approved.decision.approval.status).toBe('ADMIN_APPROVED');
    const replay = await replaying;
    expect(replay.decision.approval).toEqual(approved.decision.approval);
    expect(replay.decision.decisionId).toBe(id);
  });
});
