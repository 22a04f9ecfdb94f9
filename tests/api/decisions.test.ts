import { describe, expect, it } from 'vitest';
import { ADDR, createTestApp, json } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import {
  AGENT,
  bearer,
  createPolicy,
  decide,
  decideRaw,
  decisionBody,
  DECISION_ID_RE,
  DECISIONS,
  expectAgentKeyRequired,
  readDecision,
  rid,
  START,
  UNKNOWN_DECISION_ID,
  UNKNOWN_POLICY_ID,
  useSpendPolicyApp,
} from '../helpers/policies.js';
import { suiteFixture } from '../helpers/suite.js';

const DECISION_FIELDS = [
  'agentId',
  'amount',
  'approval',
  'asset',
  'chain',
  'createdAt',
  'decision',
  'decisionId',
  'executionAuthorized',
  'policyId',
  'policyRevision',
  'reasons',
  'recipient',
  'requestId',
].sort();

describe('POST /api/spendpolicy/decisions', () => {
  const t = useSpendPolicyApp();

  it('APPROVE: an allowed recipient under every threshold, stored with a receipt', async () => {
    const p = await createPolicy(t);
    const requestId = rid('approve');
    const res = await decideRaw(t, p, { requestId, amount: '10.50', recipient: ADDR.alice.toUpperCase().replace('0X', '0x') });
    expect(res.statusCode, res.body).toBe(200);
    const body = json(res);
    expect(Object.keys(body).sort()).toEqual(['decision', 'receipt']);
    expect(Object.keys(body.decision).sort()).toEqual(DECISION_FIELDS);
    expect(body.decision).toMatchObject({
      policyId: p.policyId,
      policyRevision: 1,
      requestId,
      agentId: AGENT,
      chain: 'base',
      asset: 'USDC',
      amount: '10.5',
      decision: 'APPROVE',
      reasons: [],
      approval: null,
      executionAuthorized: false,
      createdAt: START,
    });
    expect(body.decision.decisionId).toMatch(DECISION_ID_RE);
    expect(body.receipt).toMatchObject({
      kind: expect.any(String),
      subjectId: body.decision.decisionId,
      alg: 'EdDSA',
      issuedAt: START,
    });
    expect(body.receipt.receiptId).toMatch(/^rcpt_[0-9a-f]{32}$/);
    expect(body.receipt.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(body.receipt.signature).toMatch(/^[A-Za-z0-9_-]{86}$/);
    const row = await t.database.db.selectFrom('decisions').selectAll().where('id', '=', body.decision.decisionId).executeTakeFirst();
    expect(row?.policy_id).toBe(p.policyId);
  });

  it('BLOCK: over maxPerTransaction, with the reason', async () => {
    const p = await createPolicy(t, { maxPerTransaction: '50', dailyBudget: '1000', requireHumanAbove: '1000' });
    const { decision } = await decide(t, p, { amount: '50.000001' });
    expect(decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_max_per_transaction'], approval: null, executionAuthorized: false });
    // Exactly the limit is fine.
    expect((await decide(t, p, { amount: '50' })).decision).toMatchObject({ decision: 'APPROVE', reasons: [] });
  });

  it('BLOCK lists every reason that applies, and beats HUMAN_APPROVAL', async () => {
    const p = await createPolicy(t, { maxPerTransaction: '50', dailyBudget: '40', requireHumanAbove: '20' });
    const { decision } = await decide(t, p, { amount: '60', recipient: ADDR.carol });
    expect(decision.decision).toBe('BLOCK');
    expect(decision.reasons).toEqual(['exceeds_max_per_transaction', 'exceeds_daily_budget', 'recipient_not_allowed', 'above_human_threshold']);
  });

  it('HUMAN_APPROVAL: above requireHumanAbove, pending with an expiry', async () => {
    const p = await createPolicy(t, { requireHumanAbove: '20' });
    const { decision } = await decide(t, p, { amount: '20.000001' });
    expect(decision).toMatchObject({
      decision: 'HUMAN_APPROVAL',
      reasons: ['above_human_threshold'],
      executionAuthorized: false,
      approval: {
        status: 'PENDING',
        expiresAt: new Date(Date.parse(START) + t.config.approvalTtlSeconds * 1000).toISOString(),
        approvedAt: null,
      },
    });
    expect(Object.keys(decision.approval).sort()).toEqual(['approvedAt', 'expiresAt', 'status']);
  });

  it('HUMAN_APPROVAL for an unknown recipient when unknown recipients are not blocked', async () => {
    const p = await createPolicy(t, { blockUnknownRecipients: false });
    const { decision } = await decide(t, p, { amount: '1', recipient: ADDR.carol });
    expect(decision).toMatchObject({ decision: 'HUMAN_APPROVAL', reasons: ['recipient_unknown'] });
    expect(decision.approval.status).toBe('PENDING');
  });

  it('no key, a malformed bearer or the admin key is 401 "Agent key required"', async () => {
    const p = await createPolicy(t);
    const payload = decisionBody(p.policyId, { amount: '1' });
    for (const headers of [{}, { authorization: 'Bearer nope' }, { authorization: `Token ${p.agentKey}` }, bearer(p.adminKey)]) {
      expectAgentKeyRequired(await t.app.inject({ method: 'POST', url: DECISIONS, headers, payload }));
    }
    const stored = await t.database.db.selectFrom('decisions').select('id').where('policy_id', '=', p.policyId).execute();
    expect(stored).toEqual([]);
  });

  it("another policy's agent key, or an unknown policyId, is 404", async () => {
    const p = await createPolicy(t);
    const other = await createPolicy(t);
    expectProblem(await decideRaw(t, p, { amount: '1' }, other.agentKey), 404, 'not_found');
    expectProblem(await decideRaw(t, p, { amount: '1', policyId: UNKNOWN_POLICY_ID }), 404, 'not_found');
    expectProblem(await decideRaw(t, other, { amount: '1', policyId: UNKNOWN_POLICY_ID }), 404, 'not_found');
  });

  it("an agentId that is not the policy's is 403", async () => {
    const p = await createPolicy(t);
    const res = await decideRaw(t, p, { amount: '1', agentId: 'agent-8' });
    expectProblem(res, 403, 'agent_mismatch');
  });

  it('requestIds that differ only in invalid UTF-8 bytes are refused, not merged into one decision', async () => {
    const p = await createPolicy(t);
    const [before, after] = JSON.stringify(decisionBody(p.policyId, { amount: '1', requestId: 'pay-#' })).split('#');
    for (const bad of [0xff, 0xfe, 0x80]) {
      const res = await t.app.inject({
        method: 'POST',
        url: DECISIONS,
        headers: { ...bearer(p.agentKey), 'content-type': 'application/json' },
        payload: Buffer.concat([Buffer.from(before!), Buffer.from([bad]), Buffer.from(after!)]),
      });
      expectProblem(res, 400, 'malformed_json');
    }
    // Nothing was stored under the replacement character either: this is a new decision.
    const { decision } = await decide(t, p, { amount: '2', requestId: 'pay-\ufffd' });
    expect(decision).toMatchObject({ decision: 'APPROVE', amount: '2' });
  });

  it('an invalid proposed spend is 400', async () => {
    const p = await createPolicy(t);
    const base = decisionBody(p.policyId, { amount: '1' });
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ ...base, amount: '1.1234567' }, 'body/amount'],
      [{ ...base, amount: 1 }, 'body/amount'],
      [{ ...base, chain: 'ethereum' }, 'body/chain'],
      [{ ...base, asset: 'USDT' }, 'body/asset'],
      [{ ...base, recipient: '0x123' }, 'body/recipient'],
      [{ ...base, policyId: 'sgp_123' }, 'body/policyId'],
      [{ ...base, requestId: '' }, 'body/requestId'],
      // PostgreSQL cannot store NUL, and stores every lone surrogate as U+FFFD (so two different
      // requestIds would become one); text must be well-formed Unicode without NUL.
      [{ ...base, requestId: 'pay\u0000' }, 'body/requestId'],
      [{ ...base, requestId: 'pay-\ud800' }, 'body/requestId'],
      [{ ...base, requestId: '\udc01' }, 'body/requestId'],
      [{ ...base, agentId: 'agent\u0000' }, 'body/agentId'],
      [{ ...base, extra: 1 }, 'body/extra'],
    ];
    for (const [payload, path] of cases) {
      expectInvalid(await t.app.inject({ method: 'POST', url: DECISIONS, headers: bearer(p.agentKey), payload }), path);
    }
  });

  describe('idempotency by requestId', () => {
    it('the same requestId and content returns the stored decision and spends once', async () => {
      const p = await createPolicy(t, { dailyBudget: '50', maxPerTransaction: '50', requireHumanAbove: '50' });
      const requestId = rid('idem');
      const first = await decide(t, p, { requestId, amount: '30' });
      expect(first.decision.decision).toBe('APPROVE');

      t.clock.advance(60_000);
      for (let i = 0; i < 3; i++) {
        // Same content, written differently: the amount and the address case do not make it new.
        const again = await decide(t, p, { requestId, amount: i === 0 ? '30' : '30.000', recipient: i === 2 ? ADDR.alice.toUpperCase().replace('0X', '0x') : ADDR.alice });
        expect(again.decision).toEqual(first.decision);
        expect(again.receipt).toEqual(first.receipt);
      }
      const rows = await t.database.db.selectFrom('decisions').select('id').where('policy_id', '=', p.policyId).execute();
      expect(rows.length).toBe(1);

      // 30 + 20 fits a budget of 50 only if the 30 was spent once; then nothing is left.
      expect((await decide(t, p, { amount: '20' })).decision).toMatchObject({ decision: 'APPROVE', reasons: [] });
      expect((await decide(t, p, { amount: '0.000001' })).decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    });

    it('requestIds in any script, emoji included, are kept apart exactly as sent', async () => {
      const p = await createPolicy(t, { dailyBudget: '50', requireHumanAbove: '50' });
      const ids = ['pay-\u{1F600}', 'pay-\u{1F601}', 'paiement-é', 'paiement-e\u0301', '支払い-1'];
      const decisions = await Promise.all(ids.map((requestId) => decide(t, p, { requestId, amount: '1' })));
      expect(new Set(decisions.map((d) => d.decision.decisionId)).size).toBe(ids.length);
      expect(decisions.map((d) => d.decision.requestId)).toEqual(ids);
      for (const [i, requestId] of ids.entries()) {
        expect((await decide(t, p, { requestId, amount: '1' })).decision).toEqual(decisions[i]!.decision);
      }
    });

    it('the same requestId with different content is 409 and changes nothing', async () => {
      const p = await createPolicy(t, { dailyBudget: '50', requireHumanAbove: '50' });
      const requestId = rid('conflict');
      const first = await decide(t, p, { requestId, amount: '10' });
      expectProblem(await decideRaw(t, p, { requestId, amount: '11' }), 409, 'request_id_conflict');
      expectProblem(await decideRaw(t, p, { requestId, amount: '10', recipient: ADDR.bob }), 409, 'request_id_conflict');
      expectProblem(await decideRaw(t, p, { requestId, amount: '10', agentId: 'agent-8' }), 409, 'request_id_conflict');
      const rows = await t.database.db.selectFrom('decisions').select('id').where('policy_id', '=', p.policyId).execute();
      expect(rows.map((r) => r.id)).toEqual([first.decision.decisionId]);
      // Only the first 10 was spent: 40 more fits.
      expect((await decide(t, p, { amount: '40' })).decision.decision).toBe('APPROVE');
    });

    it('requestIds are per policy', async () => {
      const a = await createPolicy(t);
      const b = await createPolicy(t);
      const requestId = rid('shared');
      const da = await decide(t, a, { requestId, amount: '1' });
      const db = await decide(t, b, { requestId, amount: '2' });
      expect(da.decision.decisionId).not.toBe(db.decision.decisionId);
    });
  });

  describe('daily budget', () => {
    it('APPROVE 30 then 30 against 50: the second is BLOCK exceeds_daily_budget', async () => {
      const p = await createPolicy(t, { dailyBudget: '50', maxPerTransaction: '50', requireHumanAbove: '50' });
      expect((await decide(t, p, { amount: '30' })).decision).toMatchObject({ decision: 'APPROVE' });
      expect((await decide(t, p, { amount: '30' })).decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
      // A BLOCK spends nothing: 20 still fits.
      expect((await decide(t, p, { amount: '20' })).decision).toMatchObject({ decision: 'APPROVE' });
      expect((await decide(t, p, { amount: '0.000001' })).decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    });

    it('the budget is per UTC day: fresh at midnight UTC, not before', async () => {
      const p = await createPolicy(t, { dailyBudget: '50', maxPerTransaction: '50', requireHumanAbove: '50' });
      expect((await decide(t, p, { amount: '30' })).decision.decision).toBe('APPROVE');
      t.clock.set('2026-01-15T23:59:59.999Z');
      expect((await decide(t, p, { amount: '30' })).decision.decision).toBe('BLOCK');
      t.clock.set('2026-01-16T00:00:00.000Z');
      const next = await decide(t, p, { amount: '30' });
      expect(next.decision).toMatchObject({ decision: 'APPROVE', reasons: [], createdAt: '2026-01-16T00:00:00.000Z' });
      expect((await decide(t, p, { amount: '20' })).decision.decision).toBe('APPROVE');
      expect((await decide(t, p, { amount: '1' })).decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    });

    it('a pending HUMAN_APPROVAL spends nothing', async () => {
      const p = await createPolicy(t, { dailyBudget: '50', maxPerTransaction: '50', requireHumanAbove: '20' });
      expect((await decide(t, p, { amount: '40' })).decision.decision).toBe('HUMAN_APPROVAL');
      expect((await decide(t, p, { amount: '20' })).decision.decision).toBe('APPROVE');
      expect((await decide(t, p, { amount: '20' })).decision.decision).toBe('APPROVE');
      expect((await decide(t, p, { amount: '10' })).decision).toMatchObject({ decision: 'APPROVE' });
      expect((await decide(t, p, { amount: '1' })).decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    });
  });

  describe('repeat limit', () => {
    it('maxRepeats 2: the third identical recipient and amount is BLOCK repeat_limit_reached; another amount is fine', async () => {
      const p = await createPolicy(t, { maxRepeats: 2 });
      expect((await decide(t, p, { amount: '5' })).decision.decision).toBe('APPROVE');
      // Addresses compare case-insensitively.
      expect((await decide(t, p, { amount: '5.0', recipient: ADDR.alice.toUpperCase().replace('0X', '0x') })).decision.decision).toBe('APPROVE');
      const third = await decide(t, p, { amount: '5' });
      expect(third.decision).toMatchObject({ decision: 'BLOCK', reasons: ['repeat_limit_reached'] });
      // The BLOCK did not count: still blocked, not more so.
      expect((await decide(t, p, { amount: '5' })).decision.reasons).toEqual(['repeat_limit_reached']);
      expect((await decide(t, p, { amount: '6' })).decision).toMatchObject({ decision: 'APPROVE', reasons: [] });
      expect((await decide(t, p, { amount: '5', recipient: ADDR.bob })).decision).toMatchObject({ decision: 'APPROVE', reasons: [] });
      // A new UTC day starts a new window.
      t.clock.set('2026-01-16T08:00:00.000Z');
      expect((await decide(t, p, { amount: '5' })).decision.decision).toBe('APPROVE');
    });
  });
});

describe('GET /api/spendpolicy/decisions/{decisionId}', () => {
  const t = suiteFixture(() => createTestApp());

  it("answers the stored decision and receipt to the policy's admin and agent keys", async () => {
    const p = await createPolicy(t);
    const made = await decide(t, p, { amount: '25' });
    expect(made.decision.decision).toBe('HUMAN_APPROVAL');
    for (const key of [p.adminKey, p.agentKey]) {
      const res = await readDecision(t, made.decision.decisionId, bearer(key));
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res)).toEqual(made);
    }
  });

  it("another policy's admin or agent key, and an unknown decision, are 404", async () => {
    const p = await createPolicy(t);
    const other = await createPolicy(t);
    const made = await decide(t, p, { amount: '1' });
    expectProblem(await readDecision(t, made.decision.decisionId, bearer(other.adminKey)), 404, 'not_found');
    expectProblem(await readDecision(t, made.decision.decisionId, bearer(other.agentKey)), 404, 'not_found');
    expectProblem(await readDecision(t, UNKNOWN_DECISION_ID, bearer(p.adminKey)), 404, 'not_found');
    expectProblem(await readDecision(t, UNKNOWN_DECISION_ID, bearer(p.agentKey)), 404, 'not_found');
  });

  it('no key or a malformed one is 401; a malformed id is 400', async () => {
    const p = await createPolicy(t);
    const made = await decide(t, p, { amount: '1' });
    const wrong: Array<Record<string, string>> = [{}, { authorization: 'Bearer x' }, { authorization: `Basic ${p.adminKey}` }];
    for (const headers of wrong) {
      const body = expectProblem(await readDecision(t, made.decision.decisionId, headers), 401, 'agent_key_required');
      expect(body.title).toBe('Agent key required');
      expect(body.detail).toMatch(/agent key, or its admin key/);
    }
    expectInvalid(await readDecision(t, 'dec_nothex', bearer(p.adminKey)));
  });
});
