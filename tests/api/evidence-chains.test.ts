import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyChain } from '../../src/features/evidence/verify.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { expectProblem } from '../helpers/problems.js';
import { AGENT, ISO_RE, approve, bearer, createPolicy, decideRaw, type Created } from '../helpers/policies.js';
import {
  CHAIN_ID_RE,
  DIGEST_RE,
  EVIDENCE_ID_RE,
  createChain,
  createChainRaw,
  intentBody,
  readChain,
  readSummary,
  serviceJwks,
} from './evidence-helpers.js';

const sha = (s: string) => `sha256:${createHash('sha256').update(s).digest('hex')}`;

/** Micro-USDC the policy has spent (today, the only day these tests use). */
async function spentBy(t: TestApp, policyId: string): Promise<bigint> {
  const row = await t.database.db.selectFrom('policy_day_spend').select('spent_micro').where('policy_id', '=', policyId).executeTakeFirst();
  return row ? BigInt(row.spent_micro) : 0n;
}

describe('evidence chains: create, replay, read, summary', () => {
  let t: TestApp;
  let p: Created;
  beforeAll(async () => {
    t = await createTestApp();
    p = await createPolicy(t, { dailyBudget: '1000', requireHumanAbove: '20', maxPerTransaction: '50' });
  });
  afterAll(async () => {
    await t.close();
  });

  const spent = () => spentBy(t, p.policyId);

  it('creates a chain with a protected decision: 201 and exactly the specified fields', async () => {
    const body = intentBody(p.policyId, { requestId: 'create-1', amount: '5', recipient: ADDR.alice });
    const res = await createChainRaw(t, p.agentKey, body);
    expect(res.statusCode, res.body).toBe(201);
    const created = json(res);
    expect(created).toEqual({
      evidenceChainId: expect.stringMatching(CHAIN_ID_RE),
      intentDigest: expect.stringMatching(DIGEST_RE),
      decision: 'APPROVE',
      reasons: [],
      policyRevision: 1,
      decisionId: expect.stringMatching(/^dec_[0-9a-f]{32}$/),
      executionAuthorized: false,
      replayed: false,
    });
  });

  it('intentDigest is sha256 over the RFC 8785 JSON of the normalised intent (checked by hand)', async () => {
    const res = await createChainRaw(t, p.agentKey, intentBody(p.policyId, { requestId: 'digest-1', recipient: ADDR.mixedCase, amount: '7.50', expectedFrom: ADDR.mixedCase }));
    // Keys in code-point order, addresses lower case, amount canonical: written out by hand.
    const lower = ADDR.mixedCase.toLowerCase();
    const canonical = `{"agentId":"${AGENT}","amount":"7.5","asset":"USDC","chain":"base","expectedFrom":"${lower}","policyId":"${p.policyId}","recipient":"${lower}","requestId":"digest-1"}`;
    expect(json(res).intentDigest).toBe(sha(canonical));
    const chain = json(await readChain(t, json(res).evidenceChainId, p.agentKey));
    expect(chain.intent).toEqual({ policyId: p.policyId, agentId: AGENT, requestId: 'digest-1', chain: 'base', asset: 'USDC', recipient: lower, amount: '7.5', expectedFrom: lower });
  });

  it('the identical intent again is 200 replayed and spends nothing, even in another spelling', async () => {
    const body = intentBody(p.policyId, { requestId: 'replay-1', amount: '10', recipient: ADDR.bob });
    const before = await spent();
    const first = json(await createChainRaw(t, p.agentKey, body));
    const again = await createChainRaw(t, p.agentKey, { ...body, amount: '10.000', recipient: ADDR.bob.toUpperCase().replace('0X', '0x') });
    expect(again.statusCode, again.body).toBe(200);
    expect(json(again)).toEqual({ ...first, replayed: true });
    expect(await spent()).toBe(before + 10_000_000n);
  });

  it.each([
    ['amount', { amount: '10.01' }],
    ['recipient', { recipient: ADDR.alice }],
    ['expectedFrom', { expectedFrom: ADDR.carol }],
  ])('a material change (%s) under the same requestId is 409 intent_conflict', async (_field, change) => {
    const body = intentBody(p.policyId, { recipient: ADDR.bob, amount: '10' });
    await createChain(t, p, body);
    const res = await createChainRaw(t, p.agentKey, { ...body, ...change });
    const problem = expectProblem(res, 409, 'intent_conflict');
    expect(problem.title).toBe('Intent conflict');
  });

  it('reads the chain: intent, digest and a PRECHECK_COMPLETED event with the decision and its receipt', async () => {
    const created = await createChain(t, p, { requestId: 'read-1', amount: '3' });
    const res = await readChain(t, created.evidenceChainId, p.agentKey);
    expect(res.statusCode, res.body).toBe(200);
    const chain = json(res);
    expect(Object.keys(chain).sort()).toEqual(['createdAt', 'events', 'evidenceChainId', 'head', 'intent', 'intentDigest', 'policyId', 'requestId']);
    expect(chain).toMatchObject({ evidenceChainId: created.evidenceChainId, policyId: p.policyId, requestId: 'read-1', intentDigest: created.intentDigest });
    expect(chain.createdAt).toMatch(ISO_RE);
    expect(chain.events).toHaveLength(1);
    const [event] = chain.events;
    expect(Object.keys(event).sort()).toEqual(['body', 'createdAt', 'eventType', 'evidenceId', 'hash', 'linkReceipt', 'prevHash', 'sequence']);
    expect(event.linkReceipt).toMatchObject({ kind: 'evidence-event', subjectId: event.evidenceId, alg: 'EdDSA' });
    expect(chain.head).toMatchObject({ evidenceChainId: created.evidenceChainId, length: 1, headHash: event.hash, issuedAt: t.clock.now().toISOString() });
    expect(chain.head.receipt).toMatchObject({ kind: 'evidence-head', subjectId: created.evidenceChainId, alg: 'EdDSA' });
    expect(event).toMatchObject({ evidenceId: expect.stringMatching(EVIDENCE_ID_RE), sequence: 1, eventType: 'PRECHECK_COMPLETED', prevHash: created.intentDigest });
    expect(event.hash).toMatch(DIGEST_RE);
    expect(event.body.decision).toMatchObject({ decisionId: created.decisionId, decision: 'APPROVE', amount: '3', requestId: 'read-1', executionAuthorized: false });
    expect(event.body.receipt).toMatchObject({ kind: 'spend-decision', subjectId: created.decisionId, alg: 'EdDSA' });
    // The decision is the same one the decisions endpoint serves.
    const stored = await t.app.inject({ method: 'GET', url: `/api/spendpolicy/decisions/${created.decisionId}`, headers: bearer(p.agentKey) });
    expect(json(stored).decision).toEqual(event.body.decision);
    expect(verifyChain(chain, await serviceJwks(t))).toMatchObject({ ok: true, events: 1, receiptsVerified: 1, linksVerified: 1, headVerified: true, problems: [] });
  });

  it('summary: NOT_SUBMITTED, no preflight, the limitations, the pre-authorization', async () => {
    const created = await createChain(t, p, { amount: '2' });
    const res = await readSummary(t, created.evidenceChainId, p.agentKey);
    expect(res.statusCode, res.body).toBe(200);
    const s = json(res);
    expect(s).toMatchObject({
      evidenceChainId: created.evidenceChainId,
      intentDigest: created.intentDigest,
      preAuthorization: { decisionId: created.decisionId, decision: 'APPROVE', reasons: [], policyRevision: 1, approval: null },
      transactionPreflight: null,
      settlement: null,
      reconciliation: 'NOT_SUBMITTED',
      executionAuthorized: false,
    });
    const text = s.limitations.join('\n');
    expect(text).toMatch(/UNKNOWN is not verification/);
    expect(text).toMatch(/MATCH .*not permission to pay/);
    expect(text).toMatch(/Nothing was signed, executed or authorized/);
    expect(text).toMatch(/NOT_SUBMITTED/);
  });

  it('BLOCK and HUMAN_APPROVAL are stored as data; an approval shows in the summary, not in the immutable event', async () => {
    const blocked = await createChain(t, p, { amount: '60' });
    expect(blocked).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_max_per_transaction', 'above_human_threshold'] });
    const human = await createChain(t, p, { amount: '25' });
    expect(human).toMatchObject({ decision: 'HUMAN_APPROVAL', reasons: ['above_human_threshold'] });
    const pending = json(await readSummary(t, human.evidenceChainId, p.agentKey));
    expect(pending.preAuthorization.approval.status).toBe('PENDING');
    expect(pending.limitations.join()).toMatch(/HUMAN_APPROVAL/);
    expect((await approve(t, human.decisionId, p.adminKey)).statusCode).toBe(200);
    const after = json(await readSummary(t, human.evidenceChainId, p.agentKey));
    expect(after.preAuthorization.approval.status).toBe('ADMIN_APPROVED');
    const chain = json(await readChain(t, human.evidenceChainId, p.agentKey));
    expect(chain.events[0].body.decision.approval.status).toBe('PENDING');
  });
});

describe('one requestId namespace and one budget with protected decisions', () => {
  let t: TestApp;
  let p: Created;
  beforeAll(async () => {
    t = await createTestApp();
    p = await createPolicy(t, { dailyBudget: '30', requireHumanAbove: '50', maxPerTransaction: '50' });
  });
  afterAll(async () => {
    await t.close();
  });

  it('chains and plain decisions spend from the same daily budget', async () => {
    expect(await createChain(t, p, { amount: '20' })).toMatchObject({ decision: 'APPROVE' });
    const plain = json(await decideRaw(t, p, { amount: '15' }));
    expect(plain.decision).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    expect(await createChain(t, p, { amount: '11' })).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_daily_budget'] });
    expect(json(await decideRaw(t, p, { amount: '10' })).decision.decision).toBe('APPROVE');
  });

  // The tests below each take a fresh policy: the one above has spent its day.
  const fresh = () => createPolicy(t, { dailyBudget: '30', requireHumanAbove: '50', maxPerTransaction: '50' });

  it("a plain decision with a chain's requestId and identical content gets the chain's decision back, nothing spent", async () => {
    const q = await fresh();
    const created = await createChain(t, q, { requestId: 'shared-1', amount: '12', recipient: ADDR.alice });
    expect(created.decision).toBe('APPROVE');
    const res = await decideRaw(t, q, { requestId: 'shared-1', amount: '12.000', recipient: ADDR.alice });
    expect(res.statusCode).toBe(200);
    expect(json(res).decision.decisionId).toBe(created.decisionId);
    expectProblem(await decideRaw(t, q, { requestId: 'shared-1', amount: '1' }), 409, 'request_id_conflict');
    expect(await spentBy(t, q.policyId)).toBe(12_000_000n);
  });

  it('a requestId a plain decision already used cannot start a chain (409), whatever the content', async () => {
    const q = await fresh();
    expect(json(await decideRaw(t, q, { requestId: 'plain-1', amount: '12' })).decision.decision).toBe('APPROVE');
    const res = await createChainRaw(t, q.agentKey, intentBody(q.policyId, { requestId: 'plain-1', amount: '12' }));
    const problem = expectProblem(res, 409, 'intent_conflict');
    expect(problem.detail).toMatch(/outside an evidence chain/);
    expect(await spentBy(t, q.policyId)).toBe(12_000_000n);
  });

  it('an intent whose agentId is not the policy agent is refused (403) and spends nothing', async () => {
    const q = await fresh();
    expectProblem(await createChainRaw(t, q.agentKey, intentBody(q.policyId, { agentId: 'someone-else', amount: '12' })), 403, 'agent_mismatch');
    expect(await spentBy(t, q.policyId)).toBe(0n);
  });
});
