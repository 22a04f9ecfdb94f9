import { describe, expect, it } from 'vitest';
import { ADDR, createTestApp, json } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import {
  approve,
  bearer,
  createPolicy,
  decide,
  expectAdminKeyRequired,
  listDecisions,
  putPolicy,
  readDecision,
  rules,
  START,
  UNKNOWN_DECISION_ID,
  useSpendPolicyApp,
} from '../helpers/policies.js';
import { suiteFixture } from '../helpers/suite.js';

/** A policy where 20 needs a human and the day allows 50. */
const budget50 = { dailyBudget: '50', maxPerTransaction: '50', requireHumanAbove: '20', maxRepeats: 10 };

describe('POST /api/spendpolicy/decisions/{decisionId}/approve', () => {
  const t = useSpendPolicyApp();

  it('the admin key turns a PENDING decision into ADMIN_APPROVED and spends the budget then', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '40' });
    expect(pending.decision.approval.status).toBe('PENDING');

    t.clock.advance(5 * 60_000);
    const approvedAt = t.clock.now().toISOString();
    const res = await approve(t, pending.decision.decisionId, p.adminKey);
    expect(res.statusCode, res.body).toBe(200);
    const body = json(res);
    expect(Object.keys(body).sort()).toEqual(['decision', 'receipt']);
    expect(body.decision).toEqual({
      ...pending.decision,
      approval: { status: 'ADMIN_APPROVED', expiresAt: pending.decision.approval.expiresAt, approvedAt },
    });
    expect(body.decision.decision).toBe('HUMAN_APPROVAL');
    expect(body.decision.executionAuthorized).toBe(false);
    expect(body.receipt.subjectId).toBe(pending.decision.decisionId);
    expect(body.receipt.digest).not.toBe(pending.receipt.digest);
    expect(body.receipt.issuedAt).toBe(approvedAt);

    // Read back: the approved state and its receipt are what is stored now.
    const read = await readDecision(t, pending.decision.decisionId, bearer(p.agentKey));
    expect(json(read)).toEqual(body);

    // 40 of 50 is spent now: 10 fits, anything more does not.
    expect((await decide(t, p, { amount: '10.000001' })).decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    expect((await decide(t, p, { amount: '10' })).decision).toMatchObject({ decision: 'APPROVE' });
  });

  it('an approval after midnight UTC spends the day of the approval, not the day of the request', async () => {
    const p = await createPolicy(t, budget50);
    t.clock.set('2026-01-15T23:50:00.000Z');
    const pending = await decide(t, p, { amount: '40' });
    expect(pending.decision.approval.status).toBe('PENDING');
    t.clock.set('2026-01-16T00:10:00.000Z');
    const res = await approve(t, pending.decision.decisionId, p.adminKey);
    expect(res.statusCode, res.body).toBe(200);
    // The new day has 10 left; the decision keeps the day it was made.
    expect((await decide(t, p, { amount: '10.000001' })).decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    expect((await decide(t, p, { amount: '10' })).decision.decision).toBe('APPROVE');
    expect(json(res).decision.createdAt).toBe('2026-01-15T23:50:00.000Z');
  });

  it('approving twice is 409 and spends once', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '25' });
    const first = await approve(t, pending.decision.decisionId, p.adminKey);
    expect(first.statusCode).toBe(200);
    // A retry (its first answer lost, say) is told that the approval took effect.
    const again = expectProblem(await approve(t, pending.decision.decisionId, p.adminKey), 409, 'approval_conflict');
    expect(again.detail).toBe(`the decision is already approved (ADMIN_APPROVED at ${json(first).decision.approval.approvedAt}); nothing more was spent`);
    expectProblem(await approve(t, pending.decision.decisionId, p.adminKey, { note: 'again' }), 409, 'approval_conflict');
    // 25 spent once: 20 + 5 fit.
    expect((await decide(t, p, { amount: '20' })).decision.decision).toBe('APPROVE');
    expect((await decide(t, p, { amount: '5' })).decision.decision).toBe('APPROVE');
    expect((await decide(t, p, { amount: '0.000001' })).decision.reasons).toEqual(['exceeds_daily_budget']);
  });

  it('a bare POST, an empty object and { note } all approve', async () => {
    const p = await createPolicy(t, { ...budget50, dailyBudget: '500' });
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await decide(t, p, { amount: String(21 + i) })).decision.decisionId);
    const bodies = [undefined, {}, { note: 'Invoice 42 checked by Dana' }];
    for (const [i, body] of bodies.entries()) {
      const res = await approve(t, ids[i]!, p.adminKey, body);
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res).decision.approval.status).toBe('ADMIN_APPROVED');
    }
    const stored = await t.database.db.selectFrom('decisions').select(['id', 'approval_note']).where('id', '=', ids[2]!).executeTakeFirstOrThrow();
    expect(stored.approval_note).toBe('Invoice 42 checked by Dana');
  });

  it('an unknown property, or a note that is not a string, is 400 and approves nothing', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '30' });
    expectInvalid(await approve(t, pending.decision.decisionId, p.adminKey, { note: 'ok', approved: true }), 'body/approved');
    expectInvalid(await approve(t, pending.decision.decisionId, p.adminKey, { note: 5 }), 'body/note');
    expectInvalid(await approve(t, pending.decision.decisionId, p.adminKey, { note: 'x'.repeat(501) }), 'body/note');
    expectInvalid(await approve(t, pending.decision.decisionId, p.adminKey, { note: 'ok\u0000' }), 'body/note');
    // A body that is there must be an object: JSON null is not "no body".
    for (const payload of ['null', '"yes"', '[]', 'true']) {
      const res = await t.app.inject({
        method: 'POST',
        url: `/api/spendpolicy/decisions/${pending.decision.decisionId}/approve`,
        headers: { ...bearer(p.adminKey), 'content-type': 'application/json' },
        payload,
      });
      expectInvalid(res, 'body');
    }
    const read = json(await readDecision(t, pending.decision.decisionId, bearer(p.adminKey)));
    expect(read.decision.approval.status).toBe('PENDING');
  });

  it('the agent key, no key or a malformed key is 401 "Admin key required"', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '30' });
    expectAdminKeyRequired(await approve(t, pending.decision.decisionId, p.agentKey));
    expectAdminKeyRequired(await approve(t, pending.decision.decisionId, undefined));
    expectAdminKeyRequired(await approve(t, pending.decision.decisionId, 'sgp_admin_short'));
    expect(json(await readDecision(t, pending.decision.decisionId, bearer(p.adminKey))).decision.approval.status).toBe('PENDING');
  });

  it("another policy's admin key, or an unknown decision, is 404", async () => {
    const p = await createPolicy(t, budget50);
    const other = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '30' });
    expectProblem(await approve(t, pending.decision.decisionId, other.adminKey), 404, 'not_found');
    expectProblem(await approve(t, UNKNOWN_DECISION_ID, p.adminKey), 404, 'not_found');
    expectInvalid(await approve(t, 'dec_123', p.adminKey));
    expect(json(await readDecision(t, pending.decision.decisionId, bearer(p.adminKey))).decision.approval.status).toBe('PENDING');
  });

  it('409 once the policy revision changed since the decision', async () => {
    const p = await createPolicy(t, budget50);
    const old = await decide(t, p, { amount: '30' });
    const put = await putPolicy(t, p.policyId, { policy: rules(budget50) }, bearer(p.adminKey));
    expect(json(put).revision).toBe(2);
    const body = expectProblem(await approve(t, old.decision.decisionId, p.adminKey), 409, 'approval_conflict');
    expect(body.detail).toMatch(/revision/);
    // A decision made under the new revision can be approved.
    const fresh = await decide(t, p, { amount: '30' });
    expect(fresh.decision.policyRevision).toBe(2);
    expect((await approve(t, fresh.decision.decisionId, p.adminKey)).statusCode).toBe(200);
  });

  it('409 when the budget no longer allows it', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '30' });
    expect((await decide(t, p, { amount: '20' })).decision.decision).toBe('APPROVE');
    expect((await decide(t, p, { amount: '1' })).decision.decision).toBe('APPROVE');
    // 21 spent, 29 left: 30 does not fit any more.
    const body = expectProblem(await approve(t, pending.decision.decisionId, p.adminKey), 409, 'approval_conflict');
    expect(body.detail).toMatch(/exceeds_daily_budget/);
    expect(json(await readDecision(t, pending.decision.decisionId, bearer(p.adminKey))).decision.approval.status).toBe('PENDING');
    // Nothing was spent by the refusal: 29 still fits.
    expect((await decide(t, p, { amount: '19' })).decision.decision).toBe('APPROVE');
    expect((await decide(t, p, { amount: '10' })).decision.decision).toBe('APPROVE');
    expect((await decide(t, p, { amount: '0.000001' })).decision.decision).toBe('BLOCK');
  });

  it('410 after the approval request expired', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '30' });
    t.clock.advance(t.config.approvalTtlSeconds * 1000 - 1);
    const early = await decide(t, p, { amount: '30' });
    t.clock.advance(2);
    const body = expectProblem(await approve(t, pending.decision.decisionId, p.adminKey), 410, 'approval_expired');
    expect(body.code).not.toBe('expired');
    const read = json(await readDecision(t, pending.decision.decisionId, bearer(p.adminKey)));
    expect(read.decision.approval).toEqual({ status: 'EXPIRED', expiresAt: pending.decision.approval.expiresAt, approvedAt: null });
    // The one made a millisecond before is still open.
    expect((await approve(t, early.decision.decisionId, p.adminKey)).statusCode).toBe(200);
  });

  it('at exactly expiresAt the request has expired: approve is 410, the read and the lists agree', async () => {
    const p = await createPolicy(t, budget50);
    const pending = await decide(t, p, { amount: '30' });
    const id = pending.decision.decisionId;
    const idsOf = async (status: string) => json(await listDecisions(t, p.policyId, p.adminKey, `status=${status}`)).items.map((d: any) => d.decisionId);
    // A millisecond before, it is open everywhere.
    t.clock.set(new Date(Date.parse(pending.decision.approval.expiresAt) - 1).toISOString());
    expect(await idsOf('PENDING')).toEqual([id]);
    expect(await idsOf('EXPIRED')).toEqual([]);
    t.clock.set(pending.decision.approval.expiresAt);
    expect(await idsOf('PENDING')).toEqual([]);
    expect(await idsOf('EXPIRED')).toEqual([id]);
    expect(json(await readDecision(t, id, bearer(p.adminKey))).decision.approval.status).toBe('EXPIRED');
    expectProblem(await approve(t, id, p.adminKey), 410, 'approval_expired');
    // Nothing was spent: the whole budget is still there.
    expect((await decide(t, p, { amount: '20' })).decision.decision).toBe('APPROVE');
    expect((await decide(t, p, { amount: '20' })).decision.decision).toBe('APPROVE');
    expect((await decide(t, p, { amount: '10' })).decision.decision).toBe('APPROVE');
  });

  it('approving an APPROVE or a BLOCK decision is 409', async () => {
    const p = await createPolicy(t, budget50);
    const approved = await decide(t, p, { amount: '5' });
    const blocked = await decide(t, p, { amount: '60' });
    expect(approved.decision.decision).toBe('APPROVE');
    expect(blocked.decision.decision).toBe('BLOCK');
    expect(expectProblem(await approve(t, approved.decision.decisionId, p.adminKey), 409, 'approval_conflict').detail).toBe('the decision is not waiting for approval (it is APPROVE)');
    expect(expectProblem(await approve(t, blocked.decision.decisionId, p.adminKey), 409, 'approval_conflict').detail).toBe('the decision is not waiting for approval (it is BLOCK)');
    expect(json(await readDecision(t, blocked.decision.decisionId, bearer(p.adminKey))).decision).toEqual(blocked.decision);
  });

  it('an approval re-checks limits a human may not override (the repeat limit)', async () => {
    const p = await createPolicy(t, { ...budget50, maxRepeats: 1, blockUnknownRecipients: false });
    const pending = await decide(t, p, { amount: '5', recipient: ADDR.carol });
    expect(pending.decision).toMatchObject({ decision: 'HUMAN_APPROVAL', reasons: ['recipient_unknown'] });
    const second = await decide(t, p, { amount: '5', recipient: ADDR.carol });
    expect((await approve(t, pending.decision.decisionId, p.adminKey)).statusCode).toBe(200);
    // The first approval used the one allowed repeat of 5 to carol today.
    expectProblem(await approve(t, second.decision.decisionId, p.adminKey), 409, 'approval_conflict');
  });
});

describe('GET /api/spendpolicy/policies/{policyId}/decisions', () => {
  const t = suiteFixture(() => createTestApp());

  it('status=PENDING lists only open approval requests, newest first, in pages without duplicates', async () => {
    t.clock.set(START);
    const p = await createPolicy(t, { ...budget50, dailyBudget: '1000' });
    const expiredOne = await decide(t, p, { amount: '21' });
    t.clock.advance(t.config.approvalTtlSeconds * 1000 + 1);

    const pendingIds: string[] = [];
    for (let i = 0; i < 6; i++) {
      pendingIds.push((await decide(t, p, { amount: String(30 + i) })).decision.decisionId);
      await decide(t, p, { amount: '1' }); // APPROVE
      await decide(t, p, { amount: '60' }); // BLOCK
      t.clock.advance(1000);
    }
    // One of them gets approved: it is not pending any more.
    const approvedId = pendingIds.splice(2, 1)[0]!;
    expect((await approve(t, approvedId, p.adminKey)).statusCode).toBe(200);
    const expected = [...pendingIds].reverse();

    const all = await listDecisions(t, p.policyId, p.adminKey, 'status=PENDING');
    expect(all.statusCode, all.body).toBe(200);
    const body = json(all);
    expect(Object.keys(body).sort()).toEqual(['items', 'nextCursor']);
    expect(body.nextCursor).toBeNull();
    expect(body.items.map((d: any) => d.decisionId)).toEqual(expected);
    for (const d of body.items) {
      expect(d).toMatchObject({ policyId: p.policyId, decision: 'HUMAN_APPROVAL', approval: { status: 'PENDING', approvedAt: null } });
    }
    expect(body.items.map((d: any) => d.decisionId)).not.toContain(expiredOne.decision.decisionId);

    // Pages of 2 walk every item exactly once, then stop.
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await listDecisions(t, p.policyId, p.adminKey, `status=PENDING&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.statusCode, res.body).toBe(200);
      const page = json(res);
      expect(page.items.length).toBeLessThanOrEqual(2);
      seen.push(...page.items.map((d: any) => d.decisionId));
      cursor = page.nextCursor;
      pages++;
      expect(pages).toBeLessThan(10);
    } while (cursor);
    expect(seen).toEqual(expected);
    expect(new Set(seen).size).toBe(seen.length);
    expect(pages).toBe(3);

    // The expired request and the approved one are found under their own states.
    const expired = json(await listDecisions(t, p.policyId, p.adminKey, 'status=EXPIRED'));
    expect(expired.items.map((d: any) => d.decisionId)).toEqual([expiredOne.decision.decisionId]);
    expect(expired.items[0].approval.status).toBe('EXPIRED');
    const approvedList = json(await listDecisions(t, p.policyId, p.adminKey, 'status=ADMIN_APPROVED'));
    expect(approvedList.items.map((d: any) => d.decisionId)).toEqual([approvedId]);

    // Without a filter: everything, newest first.
    const everything = json(await listDecisions(t, p.policyId, p.adminKey, 'limit=200'));
    expect(everything.items.length).toBe(1 + 6 * 3);
    const created = everything.items.map((d: any) => d.createdAt);
    expect([...created].sort().reverse()).toEqual(created);
    expect(everything.items.at(-1).decisionId).toBe(expiredOne.decision.decisionId);
  });

  it("the cursor is the last decision listed: it tells nothing of other policies' decisions, and another policy's is 400", async () => {
    t.clock.set(START);
    const p = await createPolicy(t, budget50);
    const other = await createPolicy(t, budget50);
    const first = await decide(t, p, { amount: '30' });
    const second = await decide(t, p, { amount: '31' });
    const page = json(await listDecisions(t, p.policyId, p.adminKey, 'status=PENDING&limit=1'));
    expect(page.items.map((d: any) => d.decisionId)).toEqual([second.decision.decisionId]);
    // Another policy deciding in between changes neither the cursor nor the next page.
    for (let i = 0; i < 3; i++) await decide(t, other, { amount: '30' });
    expect(json(await listDecisions(t, p.policyId, p.adminKey, 'status=PENDING&limit=1')).nextCursor).toBe(page.nextCursor);
    expect(page.nextCursor).toBe(second.decision.decisionId);
    const next = json(await listDecisions(t, p.policyId, p.adminKey, `status=PENDING&limit=1&cursor=${page.nextCursor}`));
    expect(next.items.map((d: any) => d.decisionId)).toEqual([first.decision.decisionId]);
    expect(next.nextCursor).toBeNull();
    const foreign = json(await listDecisions(t, other.policyId, other.adminKey, 'limit=1')).items[0].decisionId;
    expectInvalid(await listDecisions(t, p.policyId, p.adminKey, `cursor=${foreign}`), 'querystring/cursor');
  });

  it('lists only the decisions of its own policy', async () => {
    t.clock.set(START);
    const a = await createPolicy(t, budget50);
    const b = await createPolicy(t, budget50);
    const da = await decide(t, a, { amount: '30' });
    await decide(t, b, { amount: '30' });
    const res = json(await listDecisions(t, a.policyId, a.adminKey, 'status=PENDING'));
    expect(res.items.map((d: any) => d.decisionId)).toEqual([da.decision.decisionId]);
  });

  it('admin key only: the agent key or no key is 401, another policy\'s admin key 404', async () => {
    t.clock.set(START);
    const p = await createPolicy(t, budget50);
    const other = await createPolicy(t, budget50);
    expectAdminKeyRequired(await listDecisions(t, p.policyId, p.agentKey, 'status=PENDING'));
    expectAdminKeyRequired(await listDecisions(t, p.policyId, undefined, 'status=PENDING'));
    expectProblem(await listDecisions(t, p.policyId, other.adminKey, 'status=PENDING'), 404, 'not_found');
  });

  it('an invalid query is 400', async () => {
    t.clock.set(START);
    const p = await createPolicy(t, budget50);
    for (const q of ['status=OPEN', 'limit=0', 'limit=201', 'cursor=abc', 'color=red']) {
      expectInvalid(await listDecisions(t, p.policyId, p.adminKey, q));
    }
    // Numbers only in plain digits: no hex, exponent, white space, fraction, sign, leading zero, or a repeated limit.
    for (const limit of ['0x10', '1e1', '%2010', '10.0', '', '10&limit=20', '010', '%2B10', '-0']) {
      expectInvalid(await listDecisions(t, p.policyId, p.adminKey, `limit=${limit}`), 'querystring/limit');
    }
  });
});
