import { createHash } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { ADDR, createTestApp, json } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import {
  ADMIN_KEY_RE,
  AGENT,
  approve,
  AGENT_KEY_RE,
  bearer,
  createBody,
  createPolicy,
  decide,
  decideRaw,
  expectAdminKeyRequired,
  getPolicy,
  ISO_RE,
  listDecisions,
  POLICIES,
  POLICY_ID_RE,
  putPolicy,
  readDecision,
  rotateAdminKey,
  rotateAgentKey,
  rules,
  START,
  UNKNOWN_POLICY_ID,
  useSpendPolicyApp,
} from '../helpers/policies.js';
import type { Created } from '../helpers/policies.js';
import { suiteFixture } from '../helpers/suite.js';

const RESOURCE_FIELDS = [
  'accessExpiresAt',
  'agentId',
  'agentStatus',
  'createdAt',
  'directChecks',
  'name',
  'policy',
  'policyId',
  'revision',
  'status',
].sort();
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

describe('protected policies', () => {
  const t = useSpendPolicyApp();

  describe('POST /api/spendpolicy/policies', () => {
    it('answers 201 with the policy resource, canonical amounts and two one-time keys', async () => {
      const res = await t.app.inject({
        method: 'POST',
        url: POLICIES,
        payload: {
          name: 'Ops payouts',
          agentId: AGENT,
          policy: {
            maxPerTransaction: '50.00',
            dailyBudget: '0100.500000',
            requireHumanAbove: '0.000001',
            maxRepeats: 3,
            allowedRecipients: [ADDR.alice, ADDR.mixedCase],
            blockUnknownRecipients: false,
          },
        },
      });
      expect(res.statusCode, res.body).toBe(201);
      expect(String(res.headers['content-type'])).toMatch(/^application\/json/);
      expect(res.headers.etag).toBe('"1"');
      const body = json(res);
      expect(Object.keys(body).sort()).toEqual([...RESOURCE_FIELDS, 'adminKey', 'agentKey'].sort());
      expect(body.policyId).toMatch(POLICY_ID_RE);
      expect(body.adminKey).toMatch(ADMIN_KEY_RE);
      expect(body.agentKey).toMatch(AGENT_KEY_RE);
      expect(body.adminKey).not.toBe(body.agentKey);
      expect(body).toMatchObject({
        name: 'Ops payouts',
        agentId: AGENT,
        policy: {
          maxPerTransaction: '50',
          dailyBudget: '100.5',
          requireHumanAbove: '0.000001',
          maxRepeats: 3,
          allowedRecipients: [ADDR.alice, ADDR.mixedCase],
          blockUnknownRecipients: false,
        },
        revision: 1,
        status: 'active',
        agentStatus: 'active',
        directChecks: false,
        createdAt: START,
        accessExpiresAt: '2026-02-14T12:00:00.000Z',
      });
      expect(body.createdAt).toMatch(ISO_RE);
    });

    it('no cache may keep an answer that shows keys: creation and key rotations are no-store', async () => {
      const res = await t.app.inject({ method: 'POST', url: POLICIES, payload: createBody() });
      expect(res.statusCode).toBe(201);
      expect(res.headers['cache-control']).toBe('no-store');
      for (const rotate of [rotateAgentKey, rotateAdminKey]) {
        const rotated = await rotate(t, json(res).policyId as string, json(res).adminKey as string);
        expect(rotated.statusCode).toBe(200);
        expect(rotated.headers['cache-control']).toBe('no-store');
      }
    });

    it('gives every policy its own id and keys', async () => {
      const a = await createPolicy(t);
      const b = await createPolicy(t);
      expect(new Set([a.policyId, b.policyId]).size).toBe(2);
      expect(new Set([a.adminKey, a.agentKey, b.adminKey, b.agentKey]).size).toBe(4);
    });

    it('stores only the SHA-256 hashes of the keys', async () => {
      const p = await createPolicy(t);
      const row = await t.database.db.selectFrom('policies').selectAll().where('id', '=', p.policyId).executeTakeFirstOrThrow();
      for (const [column, value] of Object.entries(row)) {
        const text = String(value);
        expect(text, column).not.toBe(p.adminKey);
        expect(text, column).not.toBe(p.agentKey);
        expect(text, column).not.toContain(p.adminKey);
        expect(text, column).not.toContain(p.agentKey);
        // Not a reversible encoding of the secret part either.
        expect(text, column).not.toContain(p.adminKey.slice('sgp_admin_'.length));
        expect(text, column).not.toContain(p.agentKey.slice('sgp_agent_'.length));
      }
      expect(row.admin_key_hash).toBe(sha256(p.adminKey));
      expect(row.agent_key_hash).toBe(sha256(p.agentKey));
    });

    it('never shows the keys (or their hashes) again in any later answer', async () => {
      const p = await createPolicy(t, { requireHumanAbove: '5' });
      const secrets = [p.adminKey, p.agentKey, sha256(p.adminKey), sha256(p.agentKey)];
      const admin = bearer(p.adminKey);
      const pending = await decide(t, p, { amount: '10' });
      const answers = [
        await getPolicy(t, p.policyId, admin),
        await putPolicy(t, p.policyId, { policy: rules({ requireHumanAbove: '5' }) }, admin),
        await getPolicy(t, p.policyId, admin),
        await listDecisions(t, p.policyId, p.adminKey),
        await listDecisions(t, p.policyId, p.adminKey, 'status=PENDING'),
        await readDecision(t, pending.decision.decisionId, admin),
        await readDecision(t, pending.decision.decisionId, bearer(p.agentKey)),
        await decideRaw(t, p, { amount: '1' }),
      ];
      for (const res of answers) {
        expect(res.statusCode, res.body).toBe(200);
        for (const s of secrets) expect(res.body).not.toContain(s);
        expect(res.body).not.toMatch(/sgp_(admin|agent)_/);
        expect(res.body.toLowerCase()).not.toContain('hash');
      }
      expect(JSON.stringify(pending)).not.toMatch(/sgp_(admin|agent)_/);
    });

    describe('400 for an invalid policy', () => {
      const cases: Array<[string, (b: any) => void, string]> = [
        ['seven fraction digits', (b) => (b.policy.maxPerTransaction = '1.1234567'), 'body/policy/maxPerTransaction'],
        ['seven fraction digits in dailyBudget', (b) => (b.policy.dailyBudget = '0.0000001'), 'body/policy/dailyBudget'],
        ['an exponent', (b) => (b.policy.requireHumanAbove = '1e3'), 'body/policy/requireHumanAbove'],
        ['a sign', (b) => (b.policy.dailyBudget = '-5'), 'body/policy/dailyBudget'],
        ['maxRepeats 0', (b) => (b.policy.maxRepeats = 0), 'body/policy/maxRepeats'],
        ['maxRepeats not an integer', (b) => (b.policy.maxRepeats = 1.5), 'body/policy/maxRepeats'],
        ['maxRepeats as a string', (b) => (b.policy.maxRepeats = '2'), 'body/policy/maxRepeats'],
        ['a bad address in allowedRecipients', (b) => (b.policy.allowedRecipients = [ADDR.alice, '0x1234']), 'body/policy/allowedRecipients/1'],
        ['a missing rule', (b) => delete b.policy.dailyBudget, 'body/policy/dailyBudget'],
        ['a missing blockUnknownRecipients', (b) => delete b.policy.blockUnknownRecipients, 'body/policy/blockUnknownRecipients'],
        ['a missing policy', (b) => delete b.policy, 'body/policy'],
        ['a missing agentId', (b) => delete b.agentId, 'body/agentId'],
        ['an empty name', (b) => (b.name = ''), 'body/name'],
        // PostgreSQL cannot store NUL; a lone surrogate would be stored as U+FFFD
        ['a NUL character in the name', (b) => (b.name = 'ops\u0000'), 'body/name'],
        ['a lone surrogate in the agentId', (b) => (b.agentId = 'agent-\ud800'), 'body/agentId'],
        ['an extra property at the top', (b) => (b.extra = true), 'body/extra'],
        ['an extra property inside the policy', (b) => (b.policy.remainingDailyBudget = '5'), 'body/policy/remainingDailyBudget'],
        ['a number amount', (b) => (b.policy.maxPerTransaction = 50), 'body/policy/maxPerTransaction'],
        ['a number dailyBudget', (b) => (b.policy.dailyBudget = 100.5), 'body/policy/dailyBudget'],
        ['a string boolean', (b) => (b.policy.blockUnknownRecipients = 'true'), 'body/policy/blockUnknownRecipients'],
      ];
      it.each(cases)('%s', async (_label, mutate, path) => {
        const body: any = createBody();
        mutate(body);
        const before = await t.database.db.selectFrom('policies').select('id').execute();
        expectInvalid(await t.app.inject({ method: 'POST', url: POLICIES, payload: body }), path);
        const after = await t.database.db.selectFrom('policies').select('id').execute();
        expect(after.length).toBe(before.length);
      });

      it.each(['0.99999999999999999', '1e2', '2.0'])('maxRepeats written as %s (JSON.parse would read a whole number) stores nothing', async (spelling) => {
        const text = JSON.stringify(createBody({ maxRepeats: 424242 })).replace('424242', spelling);
        const before = await t.database.db.selectFrom('policies').select('id').execute();
        const res = await t.app.inject({ method: 'POST', url: POLICIES, headers: { 'content-type': 'application/json' }, payload: text });
        expect(expectInvalid(res).detail).toContain(spelling);
        expect((await t.database.db.selectFrom('policies').select('id').execute()).length).toBe(before.length);
      });

      it('a body that is not JSON, and an array', async () => {
        expectProblem(
          await t.app.inject({ method: 'POST', url: POLICIES, headers: { 'content-type': 'application/json' }, payload: '{"name":' }),
          400,
          'malformed_json',
        );
        expectInvalid(await t.app.inject({ method: 'POST', url: POLICIES, payload: [createBody()] as any }));
      });
    });
  });

  describe('GET and PUT /api/spendpolicy/policies/{policyId}', () => {
    it('GET with the admin key answers the resource without secrets, with an ETag', async () => {
      const p = await createPolicy(t);
      const res = await getPolicy(t, p.policyId, bearer(p.adminKey));
      expect(res.statusCode, res.body).toBe(200);
      expect(res.headers.etag).toBe('"1"');
      const body = json(res);
      expect(Object.keys(body).sort()).toEqual(RESOURCE_FIELDS);
      const { adminKey: _a, agentKey: _b, ...resource } = p;
      expect(body).toEqual(resource);
    });

    it('the authorization scheme is case-insensitive', async () => {
      const p = await createPolicy(t);
      const res = await getPolicy(t, p.policyId, { authorization: `bearer ${p.adminKey}` });
      expect(res.statusCode, res.body).toBe(200);
    });

    it('no key, a malformed bearer or the agent key is 401 "Admin key required" on GET and PUT', async () => {
      const p = await createPolicy(t);
      const body = { policy: rules({ dailyBudget: '1' }) };
      const wrong: Array<Record<string, string>> = [
        {},
        { authorization: 'Bearer' },
        { authorization: 'Bearer not-a-key' },
        { authorization: `Bearer ${p.adminKey}x` },
        { authorization: `Bearer ${p.adminKey.slice(0, -1)}` },
        { authorization: `Basic ${p.adminKey}` },
        { authorization: p.adminKey },
        { authorization: 'Bearer sgp_root_' + 'A'.repeat(43) },
        // The scheme and the key are separated by spaces (RFC 6750), nothing else.
        { authorization: `Bearer\u00a0${p.adminKey}` },
        { authorization: `Bearer\t${p.adminKey}` },
        { authorization: `Bearer${p.adminKey}` },
        bearer(p.agentKey),
      ];
      for (const headers of wrong) {
        expectAdminKeyRequired(await getPolicy(t, p.policyId, headers));
        expectAdminKeyRequired(await putPolicy(t, p.policyId, body, headers));
      }
      // Nothing was replaced.
      const after = json(await getPolicy(t, p.policyId, bearer(p.adminKey)));
      expect(after.revision).toBe(1);
      expect(after.policy.dailyBudget).toBe('100');
    });

    it('an unknown policy, or the admin key of another policy, is 404', async () => {
      const p = await createPolicy(t);
      const other = await createPolicy(t);
      const body = { policy: rules() };
      for (const [id, key] of [
        [UNKNOWN_POLICY_ID, p.adminKey],
        [p.policyId, other.adminKey],
        [other.policyId, p.adminKey],
      ] as const) {
        expectProblem(await getPolicy(t, id, bearer(key)), 404, 'not_found');
        expectProblem(await putPolicy(t, id, body, bearer(key)), 404, 'not_found');
      }
      expect(json(await getPolicy(t, p.policyId, bearer(p.adminKey))).revision).toBe(1);
    });

    it('a malformed policyId is 400', async () => {
      const p = await createPolicy(t);
      expectInvalid(await getPolicy(t, 'sgp_NOTHEX', bearer(p.adminKey)));
      expectInvalid(await getPolicy(t, p.policyId.toUpperCase(), bearer(p.adminKey)));
    });

    it('PUT replaces the rules, increments the revision and answers the new ETag', async () => {
      const p = await createPolicy(t);
      const next = rules({ maxPerTransaction: '25.50', dailyBudget: '75.000', maxRepeats: 1, allowedRecipients: [ADDR.carol], blockUnknownRecipients: false });
      const res = await putPolicy(t, p.policyId, { policy: next, name: 'Renamed' }, bearer(p.adminKey));
      expect(res.statusCode, res.body).toBe(200);
      expect(res.headers.etag).toBe('"2"');
      const body = json(res);
      expect(Object.keys(body).sort()).toEqual(RESOURCE_FIELDS);
      expect(body).toMatchObject({
        policyId: p.policyId,
        name: 'Renamed',
        agentId: AGENT,
        revision: 2,
        status: 'active',
        agentStatus: 'active',
        createdAt: p.createdAt,
        accessExpiresAt: p.accessExpiresAt,
        policy: { ...next, maxPerTransaction: '25.5', dailyBudget: '75' },
      });
      expect(json(await getPolicy(t, p.policyId, bearer(p.adminKey)))).toEqual(body);

      // Without a name the name stays; the rules are replaced as a whole again.
      const third = await putPolicy(t, p.policyId, { policy: rules() }, bearer(p.adminKey));
      expect(third.statusCode, third.body).toBe(200);
      expect(json(third)).toMatchObject({ name: 'Renamed', revision: 3, policy: rules() });
    });

    it('PUT with an incomplete or unknown policy is 400 and changes nothing', async () => {
      const p = await createPolicy(t);
      const admin = bearer(p.adminKey);
      const { maxRepeats: _m, ...incomplete } = rules();
      expectInvalid(await putPolicy(t, p.policyId, { policy: incomplete }, admin), 'body/policy/maxRepeats');
      expectInvalid(await putPolicy(t, p.policyId, { policy: rules(), agentId: 'someone-else' }, admin), 'body/agentId');
      expectInvalid(await putPolicy(t, p.policyId, { policy: rules(), status: 'paused' }, admin), 'body/status');
      expectInvalid(await putPolicy(t, p.policyId, { policy: { ...rules(), extra: 1 } }, admin), 'body/policy/extra');
      expectInvalid(await putPolicy(t, p.policyId, {}, admin), 'body/policy');
      expect(json(await getPolicy(t, p.policyId, admin)).revision).toBe(1);
    });

    it('If-Match: a stale revision is 412, the current one is 200', async () => {
      const p = await createPolicy(t);
      const admin = bearer(p.adminKey);
      const first = await putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '90' }) }, { ...admin, 'if-match': '"1"' });
      expect(first.statusCode, first.body).toBe(200);
      expect(json(first).revision).toBe(2);

      const stale = await putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '80' }) }, { ...admin, 'if-match': '"1"' });
      expectProblem(stale, 412, 'precondition_failed');
      const ahead = await putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '80' }) }, { ...admin, 'if-match': '"7"' });
      expectProblem(ahead, 412, 'precondition_failed');
      expect(json(await getPolicy(t, p.policyId, admin))).toMatchObject({ revision: 2, policy: { dailyBudget: '90' } });

      const etag = String((await getPolicy(t, p.policyId, admin)).headers.etag);
      const ok = await putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '80' }) }, { ...admin, 'if-match': etag });
      expect(ok.statusCode, ok.body).toBe(200);
      expect(ok.headers.etag).toBe('"3"');
      expect(json(ok)).toMatchObject({ revision: 3, policy: { dailyBudget: '80' } });

      for (const malformed of ['banana', '"3', '3"', '"3" "4"', ',', ' , ,', ' ']) {
        expectProblem(await putPolicy(t, p.policyId, { policy: rules() }, { ...admin, 'if-match': malformed }), 400, 'invalid_request');
      }
      // Well-formed entity tags that name no revision, or only others, are 412 (RFC 9110 §13.1.1).
      for (const other of ['""', '"abc"', '"03"', '"1", "2"', '"4", W/"9"', ', "1"', '"1", , "2",']) {
        expectProblem(await putPolicy(t, p.policyId, { policy: rules() }, { ...admin, 'if-match': other }), 412, 'precondition_failed');
      }
      expect(json(await getPolicy(t, p.policyId, admin)).revision).toBe(3);
      // A list that names the current revision among others replaces it; its empty elements are
      // skipped (RFC 9110 §5.6.1.2).
      const listed = await putPolicy(t, p.policyId, { policy: rules() }, { ...admin, 'if-match': ', "2", , "3" ,' });
      expect(listed.statusCode, listed.body).toBe(200);
      expect(json(listed).revision).toBe(4);
      // The ETag as a compressing proxy weakens it, and a bare revision, name the revision too.
      expectProblem(await putPolicy(t, p.policyId, { policy: rules() }, { ...admin, 'if-match': 'W/"3"' }), 412, 'precondition_failed');
      const weak = await putPolicy(t, p.policyId, { policy: rules() }, { ...admin, 'if-match': 'W/"4"' });
      expect(json(weak).revision).toBe(5);
      const bare = await putPolicy(t, p.policyId, { policy: rules() }, { ...admin, 'if-match': '5' });
      expect(json(bare).revision).toBe(6);
      // `*` names any revision (RFC 9110 §13.1.1): it replaces whatever is current.
      const any = await putPolicy(t, p.policyId, { policy: rules() }, { ...admin, 'if-match': ' * ' });
      expect(any.statusCode, any.body).toBe(200);
      expect(json(any).revision).toBe(7);
    });

    it('PUT sets status and agentStatus inactive: decisions are then 403, and active again works', async () => {
      const p = await createPolicy(t);
      const admin = bearer(p.adminKey);
      const first = json(await decideRaw(t, p, { amount: '1', requestId: 'before-the-stop' })).decision;
      expect(first.decision).toBe('APPROVE');

      const off = await putPolicy(t, p.policyId, { policy: rules(), status: 'inactive' }, admin);
      expect(off.statusCode, off.body).toBe(200);
      expect(json(off)).toMatchObject({ status: 'inactive', agentStatus: 'active', revision: 2 });
      expectProblem(await decideRaw(t, p, { amount: '1' }), 403, 'inactive');
      // The stop holds for retries too: an APPROVE given before it is not repeated to the agent.
      expectProblem(await decideRaw(t, p, { amount: '1', requestId: 'before-the-stop' }), 403, 'inactive');

      const agentOff = await putPolicy(t, p.policyId, { policy: rules(), status: 'active', agentStatus: 'inactive' }, admin);
      expect(json(agentOff)).toMatchObject({ status: 'active', agentStatus: 'inactive', revision: 3 });
      expect(json(await getPolicy(t, p.policyId, admin))).toMatchObject({ status: 'active', agentStatus: 'inactive' });
      expectProblem(await decideRaw(t, p, { amount: '1' }), 403, 'inactive');

      // Omitted statuses are kept, not reset.
      const kept = await putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '99' }) }, admin);
      expect(json(kept)).toMatchObject({ status: 'active', agentStatus: 'inactive', revision: 4 });
      expectProblem(await decideRaw(t, p, { amount: '1' }), 403, 'inactive');

      const on = await putPolicy(t, p.policyId, { policy: rules(), agentStatus: 'active' }, admin);
      expect(json(on)).toMatchObject({ status: 'active', agentStatus: 'active', revision: 5 });
      const again = await decide(t, p, { amount: '1' });
      expect(again.decision).toMatchObject({ decision: 'APPROVE', policyRevision: 5 });
      // Active again, the retry gets its stored decision back, spending nothing.
      const retried = await decideRaw(t, p, { amount: '1', requestId: 'before-the-stop' });
      expect(json(retried).decision).toEqual(first);
    });

    it('a PUT that leaves the statuses out does not undo a stop stored while it was under way', async () => {
      // Two administrators, neither with If-Match: one stops the agent; the other only changes the
      // budget, and had read the policy before the stop was stored. The spy only orders the two
      // requests' steps; both write through the real replace().
      const p = await createPolicy(t);
      const admin = bearer(p.adminKey);
      const real = PolicyStore.prototype.replace;
      let stopStored!: () => void;
      const stopDone = new Promise<void>((resolve) => (stopStored = resolve));
      let budgetRead!: () => void;
      const budgetReady = new Promise<void>((resolve) => (budgetRead = resolve));
      const spy = vi.spyOn(PolicyStore.prototype, 'replace').mockImplementation(async function (this: PolicyStore, row, change, expected, now) {
        if (change.agentStatus === 'inactive') {
          const out = await real.call(this, row, change, expected, now);
          stopStored();
          return out;
        }
        budgetRead();
        await stopDone;
        return real.call(this, row, change, expected, now);
      });
      try {
        const budgetChange = putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '200' }) }, admin);
        await budgetReady; // it has read the policy, and waits to write
        const stop = await putPolicy(t, p.policyId, { policy: rules(), agentStatus: 'inactive' }, admin);
        expect(json(stop)).toMatchObject({ agentStatus: 'inactive', revision: 2 });
        expect(json(await budgetChange)).toMatchObject({ agentStatus: 'inactive', revision: 3, policy: { dailyBudget: '200' } });
      } finally {
        spy.mockRestore();
      }
      expect(json(await getPolicy(t, p.policyId, admin))).toMatchObject({ agentStatus: 'inactive', revision: 3 });
      expectProblem(await decideRaw(t, p, { amount: '1' }), 403, 'inactive');
    });

    it('two PUTs with the same If-Match at once: one is 200, the other 412 and overwrites nothing', async () => {
      // Both read revision 1 (and pass the If-Match check against it) before either writes: only
      // the write's own revision check can refuse the second.
      const p = await createPolicy(t);
      const admin = { ...bearer(p.adminKey), 'if-match': '"1"' };
      const real = PolicyStore.prototype.replace;
      let arrived = 0;
      let bothRead!: () => void;
      const ready = new Promise<void>((resolve) => (bothRead = resolve));
      const spy = vi.spyOn(PolicyStore.prototype, 'replace').mockImplementation(async function (this: PolicyStore, row, change, expected, now) {
        if (++arrived === 2) bothRead();
        await ready;
        return real.call(this, row, change, expected, now);
      });
      let answers;
      try {
        answers = await Promise.all([
          putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '10' }) }, admin),
          putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '500' }), agentStatus: 'inactive' }, admin),
        ]);
      } finally {
        spy.mockRestore();
      }
      expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 412]);
      expectProblem(answers.find((r) => r.statusCode === 412)!, 412, 'precondition_failed');
      const winner = json(answers.find((r) => r.statusCode === 200)!);
      expect(winner.revision).toBe(2);
      expect(json(await getPolicy(t, p.policyId, bearer(p.adminKey)))).toEqual(winner);
    });
  });

  describe('POST /api/spendpolicy/policies/{policyId}/agent-key', () => {
    it('replaces the agent key: the new one works, the old one is 404 at once', async () => {
      const p = await createPolicy(t);
      const before = await decide(t, p, { amount: '1' });

      const res = await rotateAgentKey(t, p.policyId, p.adminKey);
      expect(res.statusCode, res.body).toBe(200);
      const body = json(res);
      expect(Object.keys(body).sort()).toEqual(['agentKey', 'policyId']);
      expect(body.policyId).toBe(p.policyId);
      expect(body.agentKey).toMatch(AGENT_KEY_RE);
      expect(body.agentKey).not.toBe(p.agentKey);

      expectProblem(await decideRaw(t, p, { amount: '1' }), 404, 'not_found');
      expectProblem(await readDecision(t, before.decision.decisionId, bearer(p.agentKey)), 404, 'not_found');

      const fresh = { policyId: p.policyId, agentKey: body.agentKey as string };
      expect((await decide(t, fresh, { amount: '1' })).decision.decision).toBe('APPROVE');
      const read = await readDecision(t, before.decision.decisionId, bearer(fresh.agentKey));
      expect(read.statusCode, read.body).toBe(200);

      // Only the hash of the new key is stored; the admin key is unchanged.
      const row = await t.database.db.selectFrom('policies').selectAll().where('id', '=', p.policyId).executeTakeFirstOrThrow();
      expect(row.agent_key_hash).toBe(sha256(fresh.agentKey));
      expect(row.admin_key_hash).toBe(sha256(p.adminKey));
      expect((await getPolicy(t, p.policyId, bearer(p.adminKey))).body).not.toContain(fresh.agentKey);
    });

    it('two rotations at once: one answers a key, which works; the other is 409, never a dead key', async () => {
      const p = await createPolicy(t);
      const answers = await rotateTwiceAtOnce('rotateAgentKey', () => rotateAgentKey(t, p.policyId, p.adminKey));
      expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 409]);
      expectProblem(answers.find((r) => r.statusCode === 409)!, 409, 'conflict');
      const winner = json(answers.find((r) => r.statusCode === 200)!).agentKey as string;
      expect((await decide(t, { policyId: p.policyId, agentKey: winner }, { amount: '1' })).decision.decision).toBe('APPROVE');
      expectProblem(await decideRaw(t, p, { amount: '1' }), 404, 'not_found');
      // The administrator who got 409 rotates again and gets a key of their own.
      const again = await rotateAgentKey(t, p.policyId, p.adminKey);
      expect(again.statusCode, again.body).toBe(200);
      expect((await decide(t, { policyId: p.policyId, agentKey: json(again).agentKey as string }, { amount: '1' })).decision.decision).toBe('APPROVE');
    });

    it('needs the admin key of that policy', async () => {
      const p = await createPolicy(t);
      const other = await createPolicy(t);
      expectAdminKeyRequired(await rotateAgentKey(t, p.policyId, undefined));
      expectAdminKeyRequired(await rotateAgentKey(t, p.policyId, p.agentKey));
      expectAdminKeyRequired(await rotateAgentKey(t, p.policyId, 'garbage'));
      expectProblem(await rotateAgentKey(t, p.policyId, other.adminKey), 404, 'not_found');
      expectProblem(await rotateAgentKey(t, UNKNOWN_POLICY_ID, p.adminKey), 404, 'not_found');
      // The agent key still works: none of those replaced it.
      expect((await decide(t, p, { amount: '1' })).decision.decision).toBe('APPROVE');
    });
  });
});

/** Two rotations of one key whose requests both read the policy before either writes (the spy only orders their steps). */
async function rotateTwiceAtOnce(method: 'rotateAgentKey' | 'rotateAdminKey', rotate: () => ReturnType<typeof rotateAgentKey>) {
  const real = PolicyStore.prototype[method];
  let arrived = 0;
  let bothRead!: () => void;
  const ready = new Promise<void>((resolve) => (bothRead = resolve));
  const spy = vi.spyOn(PolicyStore.prototype, method).mockImplementation(async function (this: PolicyStore, row, now) {
    if (++arrived === 2) bothRead();
    await ready;
    return real.call(this, row, now);
  });
  try {
    return await Promise.all([rotate(), rotate()]);
  } finally {
    spy.mockRestore();
  }
}

describe('POST /api/spendpolicy/policies/{policyId}/admin-key', () => {
  const t = useSpendPolicyApp();

  it('replaces a leaked admin key: the new one works, the old one is 404 at once, the agent key is untouched', async () => {
    const p = await createPolicy(t, { requireHumanAbove: '5' });
    const pending = await decide(t, p, { amount: '6' });
    const res = await rotateAdminKey(t, p.policyId, p.adminKey);
    expect(res.statusCode, res.body).toBe(200);
    const body = json(res);
    expect(Object.keys(body).sort()).toEqual(['adminKey', 'policyId']);
    expect(body.adminKey).toMatch(ADMIN_KEY_RE);
    expect(body.adminKey).not.toBe(p.adminKey);

    // Whoever holds the old key can no longer read, change, approve or rotate anything.
    expectProblem(await getPolicy(t, p.policyId, bearer(p.adminKey)), 404, 'not_found');
    expectProblem(await approve(t, pending.decision.decisionId, p.adminKey), 404, 'not_found');
    expectProblem(await rotateAdminKey(t, p.policyId, p.adminKey), 404, 'not_found');
    expectProblem(await rotateAgentKey(t, p.policyId, p.adminKey), 404, 'not_found');

    const approved = await approve(t, pending.decision.decisionId, body.adminKey);
    expect(approved.statusCode, approved.body).toBe(200);
    expect((await decide(t, p, { amount: '1' })).decision.decision).toBe('APPROVE');
    const row = await t.database.db.selectFrom('policies').selectAll().where('id', '=', p.policyId).executeTakeFirstOrThrow();
    expect(row.admin_key_hash).toBe(sha256(body.adminKey));
    expect(row.agent_key_hash).toBe(sha256(p.agentKey));
  });

  it('two rotations at once: one answers the key in force, the other 404 (the key it came with is gone)', async () => {
    const p = await createPolicy(t);
    const answers = await rotateTwiceAtOnce('rotateAdminKey', () => rotateAdminKey(t, p.policyId, p.adminKey));
    expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 404]);
    expectProblem(answers.find((r) => r.statusCode === 404)!, 404, 'not_found');
    const winner = json(answers.find((r) => r.statusCode === 200)!).adminKey as string;
    expect((await getPolicy(t, p.policyId, bearer(winner))).statusCode).toBe(200);
  });

  it.each([
    ['PUT', 'replace', (p: Created) => putPolicy(t, p.policyId, { policy: rules({ dailyBudget: '500' }) }, bearer(p.adminKey))],
    ['agent-key rotation', 'rotateAgentKey', (p: Created) => rotateAgentKey(t, p.policyId, p.adminKey)],
  ] as const)('a %s with the old key that read the policy just before the admin key was replaced: 404, nothing written', async (_name, method, call) => {
    const p = await createPolicy(t);
    let replacement: string | undefined;
    const real = PolicyStore.prototype[method] as (...args: unknown[]) => Promise<unknown>;
    const spy = vi.spyOn(PolicyStore.prototype, method).mockImplementation(async function (this: PolicyStore, ...args: unknown[]) {
      spy.mockRestore();
      replacement = json(await rotateAdminKey(t, p.policyId, p.adminKey)).adminKey;
      return real.apply(this, args);
    } as never);
    expectProblem(await call(p), 404, 'not_found');
    const row = await t.database.db.selectFrom('policies').selectAll().where('id', '=', p.policyId).executeTakeFirstOrThrow();
    expect(Number(row.revision)).toBe(1);
    expect(row.agent_key_hash).toBe(sha256(p.agentKey));
    expect(row.admin_key_hash).toBe(sha256(replacement!));
  });

  it('needs the admin key of that policy', async () => {
    const p = await createPolicy(t);
    const other = await createPolicy(t);
    expectAdminKeyRequired(await rotateAdminKey(t, p.policyId, undefined));
    expectAdminKeyRequired(await rotateAdminKey(t, p.policyId, p.agentKey));
    expectProblem(await rotateAdminKey(t, p.policyId, other.adminKey), 404, 'not_found');
    expectProblem(await rotateAdminKey(t, UNKNOWN_POLICY_ID, p.adminKey), 404, 'not_found');
    expect((await getPolicy(t, p.policyId, bearer(p.adminKey))).statusCode).toBe(200);
  });
});

describe('key rotations take no parameters', () => {
  const t = useSpendPolicyApp();

  for (const kind of ['agent-key', 'admin-key'] as const) {
    it(`${kind}: a body with anything in it is 400 and rotates nothing; no body or {} rotates`, async () => {
      const p = await createPolicy(t);
      const rotate = (payload: string | undefined) =>
        t.app.inject({ method: 'POST', url: `/api/spendpolicy/policies/${p.policyId}/${kind}`, headers: { ...bearer(p.adminKey), ...(payload === undefined ? {} : { 'content-type': 'application/json' }) }, ...(payload === undefined ? {} : { payload }) });
      for (const payload of ['{"reason":"leaked"}', 'null', '[]', '"x"']) {
        const body = expectProblem(await rotate(payload), 400, 'invalid_request');
        expect(body.detail, payload).toMatch(/^body/);
      }
      // Nothing was rotated: both keys still work.
      expect((await getPolicy(t, p.policyId, bearer(p.adminKey))).statusCode).toBe(200);
      expect((await decideRaw(t, p, { requestId: `rot-${kind}`, amount: '1' })).statusCode).toBe(200);
      const empty = await rotate('{}');
      expect(empty.statusCode).toBe(200);
      if (kind === 'admin-key') p.adminKey = json(empty).adminKey;
      expect((await rotate(undefined)).statusCode).toBe(200);
    });
  }
});

describe('free pilot creation limit', () => {
  const t = suiteFixture(() => createTestApp({ config: { rateLimits: true, policyCreateLimit: 3 } }));

  it('answers 429 "Free pilot creation limit reached" with Retry-After after the configured number of creations', async () => {
    const create = (remoteAddress: string) => t.app.inject({ method: 'POST', url: POLICIES, payload: createBody(), remoteAddress });
    // Rejected bodies create nothing and use none of the limit.
    for (let i = 0; i < 5; i++) {
      const bad = await t.app.inject({ method: 'POST', url: POLICIES, payload: { ...createBody(), extra: i }, remoteAddress: '198.51.100.7' });
      expectInvalid(bad, 'body/extra');
    }
    for (let i = 0; i < 3; i++) expect((await create('198.51.100.7')).statusCode).toBe(201);
    const res = await create('198.51.100.7');
    const body = expectProblem(res, 429, 'rate_limited');
    expect(body.title).toBe('Free pilot creation limit reached');
    const retryAfter = String(res.headers['retry-after']);
    expect(retryAfter).toMatch(/^[1-9][0-9]*$/);
    expect(Number(retryAfter)).toBeLessThanOrEqual(86_400);
    expect(body.retryAfter).toBe(Number(retryAfter));
    expect(res.body).not.toMatch(/sgp_(admin|agent)_/);

    // Nothing was created by the refused request; another source is unaffected.
    const rows = await t.database.db.selectFrom('policies').select('id').execute();
    expect(rows.length).toBe(3);
    expect((await create('198.51.100.8')).statusCode).toBe(201);
  });
});
