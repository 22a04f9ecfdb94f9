// A signed EXPIRED must never be followed by ADMIN_APPROVED, also when the approval is judged by
// another clock: another instance's a few seconds behind (the README asks only that instances
// stay well within a minute of each other), or this instance's own, stepped back.
import { beforeEach, describe, expect, it } from 'vitest';
import { createTestApp, json, useTwoTestApps, type TestApp } from '../helpers/app.js';
import { expectProblem } from '../helpers/problems.js';
import { approve, bearer, createPolicy, decide, readDecision, START } from '../helpers/policies.js';
import { suiteFixture } from '../helpers/suite.js';

const budget50 = { dailyBudget: '50', maxPerTransaction: '50', requireHumanAbove: '20', maxRepeats: 10 };

describe('an expiry one clock has signed binds a clock that runs behind', () => {
  const pair = useTwoTestApps();
  beforeEach(() => {
    pair.a.clock.set(START);
    pair.b.clock.set(START);
  });

  /** A pending HUMAN_APPROVAL; then a's clock 2 s past its expiry and b's 3 s before it (5 s apart). */
  async function expiredOnAOnly() {
    const p = await createPolicy(pair.a, budget50);
    const pending = await decide(pair.a, p, { amount: '30' });
    expect(pending.decision.approval.status).toBe('PENDING');
    const expiresAt = Date.parse(pending.decision.approval.expiresAt);
    pair.a.clock.set(new Date(expiresAt + 2000));
    pair.b.clock.set(new Date(expiresAt - 3000));
    return { p, pending, id: pending.decision.decisionId as string };
  }

  it('a read signed EXPIRED: the other instance cannot approve it any more', async () => {
    const { p, id } = await expiredOnAOnly();
    const read = await readDecision(pair.a, id, bearer(p.agentKey));
    expect(read.statusCode, read.body).toBe(200);
    expect(json(read).decision.approval.status).toBe('EXPIRED');

    expectProblem(await approve(pair.b, id, p.adminKey), 410, 'approval_expired');
    // b shows what a signed, and nothing was spent: the whole 50 still fits.
    expect(json(await readDecision(pair.b, id, bearer(p.agentKey)))).toEqual(json(read));
    expect((await decide(pair.b, p, { amount: '20' })).decision.decision).toBe('APPROVE');
    expect((await decide(pair.b, p, { amount: '20' })).decision.decision).toBe('APPROVE');
    expect((await decide(pair.b, p, { amount: '10' })).decision.decision).toBe('APPROVE');
  });

  it('a replay of the request answered EXPIRED: the other instance cannot approve it any more', async () => {
    const { p, pending, id } = await expiredOnAOnly();
    const replay = await decide(pair.a, p, { requestId: pending.decision.requestId, amount: '30' });
    expect(replay.decision.approval.status).toBe('EXPIRED');

    expectProblem(await approve(pair.b, id, p.adminKey), 410, 'approval_expired');
    expect(json(await readDecision(pair.b, id, bearer(p.adminKey))).decision.approval.status).toBe('EXPIRED');
  });
});

describe('an expiry signed before the clock was stepped back', () => {
  const t: TestApp = suiteFixture(() => createTestApp());
  beforeEach(() => t.clock.set(START));

  it('stays expired: the approval is 410 and the decision reads as signed', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '30' });
    const id = pending.decision.decisionId as string;
    const expiresAt = Date.parse(pending.decision.approval.expiresAt);
    t.clock.set(new Date(expiresAt + 1000));
    const read = json(await readDecision(t, id, bearer(p.adminKey)));
    expect(read.decision.approval.status).toBe('EXPIRED');

    t.clock.set(new Date(expiresAt - 10 * 60_000)); // NTP steps the clock back ten minutes
    expectProblem(await approve(t, id, p.adminKey), 410, 'approval_expired');
    expect(json(await readDecision(t, id, bearer(p.adminKey)))).toEqual(read);
  });
});
