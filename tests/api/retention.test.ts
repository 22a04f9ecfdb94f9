import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { purgeExpired } from '../../src/features/maintenance.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { GroupCommitter } from '../../src/platform/db/group-commit.js';
import { PURGE_CHUNK_ROWS } from '../../src/platform/db/tx.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { expectProblem } from '../helpers/problems.js';
import { suiteFixture } from '../helpers/suite.js';
import {
  approve,
  bearer,
  createPolicy,
  decide,
  decideRaw,
  getPolicy,
  listDecisions,
  putPolicy,
  readDecision,
  rotateAdminKey,
  rotateAgentKey,
  rules,
  type Created,
} from '../helpers/policies.js';

const START = '2026-01-15T12:00:00.000Z';
const DAY = 86_400_000;
const RETENTION = 30 * DAY;

type Res = { statusCode: number; headers: Record<string, unknown>; body: string };

/**
 * Pilot retention: policy access ends 30 days after creation (accessExpiresAt). From then on
 * every endpoint of the policy answers 410, before and after its data is purged.
 */
describe('pilot policy retention', () => {
  let t: TestApp;
  let p: Created;
  let agentKey: string;
  const ids = { approved: '', pending: '', blocked: '', pendingOld: '' };

  beforeAll(async () => {
    t = await createTestApp();
    t.clock.set(START);
    p = await createPolicy(t, { dailyBudget: '100', requireHumanAbove: '20' });
    agentKey = p.agentKey;
    ids.pendingOld = (await decide(t, p, { amount: '30' })).decision.decisionId;
  });
  afterAll(async () => {
    await t.close();
  });

  /** Every policy and decision endpoint of `p`, each with the right kind of key. */
  function everyEndpoint(): Array<[string, () => Promise<Res>]> {
    const admin = p.adminKey;
    return [
      ['GET policy', () => getPolicy(t, p.policyId, bearer(admin))],
      ['PUT policy', () => putPolicy(t, p.policyId, { policy: rules({ requireHumanAbove: '20' }) }, bearer(admin))],
      ['list decisions', () => listDecisions(t, p.policyId, admin)],
      ['list pending', () => listDecisions(t, p.policyId, admin, 'status=PENDING')],
      ['decide', () => decideRaw(t, { policyId: p.policyId, agentKey }, { amount: '1' })],
      ['read decision (admin)', () => readDecision(t, ids.approved, bearer(admin))],
      ['read decision (agent)', () => readDecision(t, ids.blocked, bearer(agentKey))],
      ['approve', () => approve(t, ids.pending, admin)],
      ['rotate agent key', () => rotateAgentKey(t, p.policyId, admin)],
      // Last: the admin key it replaces is the one every call above uses.
      ['rotate admin key', () => rotateAdminKey(t, p.policyId, admin)],
    ];
  }

  it('states accessExpiresAt 30 days after creation', async () => {
    const res = json(await getPolicy(t, p.policyId, bearer(p.adminKey)));
    expect(res.createdAt).toBe(START);
    expect(res.accessExpiresAt).toBe(new Date(Date.parse(START) + RETENTION).toISOString());
  });

  it('every endpoint works until just before then', async () => {
    t.clock.set(new Date(Date.parse(START) + RETENTION - 10 * 60_000));
    ids.approved = (await decide(t, { policyId: p.policyId, agentKey }, { amount: '1' })).decision.decisionId;
    ids.blocked = (await decide(t, { policyId: p.policyId, agentKey }, { amount: '1000' })).decision.decisionId;
    ids.pending = (await decide(t, { policyId: p.policyId, agentKey }, { amount: '25' })).decision.decisionId;
    const second = (await decide(t, { policyId: p.policyId, agentKey }, { amount: '26' })).decision.decisionId;

    for (const [name, call] of everyEndpoint()) {
      const res = await call();
      expect(res.statusCode, `${name}: ${res.body}`).toBe(200);
      if (name === 'PUT policy') {
        // The PUT moved the revision on: approve a decision of the new revision next.
        ids.pending = (await decide(t, { policyId: p.policyId, agentKey }, { amount: '27' })).decision.decisionId;
      }
      if (name === 'approve') {
        ids.pending = (await decide(t, { policyId: p.policyId, agentKey }, { amount: '28' })).decision.decisionId;
      }
      if (name === 'rotate agent key') agentKey = json(res).agentKey;
      if (name === 'rotate admin key') p.adminKey = json(res).adminKey;
    }
    expect(second).toMatch(/^dec_/);
    expect(ids.pending).toMatch(/^dec_/);
  });

  it('answers 410 on every endpoint once access expired, whichever kind of key is used', async () => {
    t.clock.set(p.accessExpiresAt as string);
    for (const [name, call] of everyEndpoint()) {
      const body = expectProblem(await call(), 410, 'expired');
      expect(body.title, name).toBeTruthy();
    }
    // The 410 is about the policy, not the approval request: that one had not expired.
    t.clock.set(new Date(Date.parse(p.accessExpiresAt as string) + DAY));
    for (const [, call] of everyEndpoint()) expectProblem(await call(), 410, 'expired');
    expectProblem(await readDecision(t, ids.pending, bearer(agentKey)), 410, 'expired');
    expectProblem(await readDecision(t, ids.pendingOld, bearer(p.adminKey)), 410, 'expired');
  });

  it('the wrong key or kind of key still gets 404 and 401, never the policy\'s state', async () => {
    const stranger = await createPolicy(t);
    expectProblem(await getPolicy(t, p.policyId, bearer(stranger.adminKey)), 404, 'not_found');
    expectProblem(await readDecision(t, ids.approved, bearer(stranger.adminKey)), 404, 'not_found');
    expectProblem(await getPolicy(t, p.policyId, bearer(agentKey)), 401, 'admin_key_required');
    expectProblem(await decideRaw(t, { policyId: p.policyId, agentKey: p.adminKey }, { amount: '1' }), 401, 'agent_key_required');
  });

  it("a key whose own policy expired gets 410 on another policy's decision too, before and after a purge", async () => {
    // The answer speaks of the caller's own access only: the same before a purge removed the
    // decision (when the service could tell whose it was) as after.
    const now = t.clock.now();
    t.clock.set(new Date(now.getTime() - RETENTION));
    const gone = await createPolicy(t);
    t.clock.set(now);
    const live = await createPolicy(t, { requireHumanAbove: '20' });
    const pendingLive = (await decide(t, live, { amount: '25' })).decision.decisionId;
    for (const id of [ids.approved, pendingLive]) {
      expectProblem(await readDecision(t, id, bearer(gone.adminKey)), 410, 'expired');
      expectProblem(await readDecision(t, id, bearer(gone.agentKey)), 410, 'expired');
      expectProblem(await approve(t, id, gone.adminKey), 410, 'expired');
    }
    // The decision itself is untouched: its own admin still approves it.
    expect((await approve(t, pendingLive, live.adminKey)).statusCode).toBe(200);
  });

  it('after purge the decisions are gone, and every endpoint still answers 410 (not 404)', async () => {
    t.clock.set(new Date(Date.parse(p.accessExpiresAt as string) + DAY));
    const live = await createPolicy(t, { requireHumanAbove: '20' });
    const liveDecision = await decide(t, live, { amount: '25' });
    const before = await t.database.db.selectFrom('decisions').select('id').where('policy_id', '=', p.policyId).execute();
    expect(before.length).toBeGreaterThanOrEqual(6);

    const result = await purgeExpired(t.database, t.clock.now());
    expect(result.policies).toBeGreaterThanOrEqual(1);

    const after = await t.database.db.selectFrom('decisions').select('id').where('policy_id', '=', p.policyId).execute();
    expect(after).toEqual([]);
    const spend = await t.database.db.selectFrom('policy_day_spend').select('day').where('policy_id', '=', p.policyId).execute();
    expect(spend).toEqual([]);
    const row = await t.database.db.selectFrom('policies').selectAll().where('id', '=', p.policyId).executeTakeFirstOrThrow();
    expect(row.purged_at).not.toBeNull();
    expect(row.rules).toBe('{}');

    for (const [name, call] of everyEndpoint()) {
      const res = await call();
      expect(res.statusCode, `${name}: ${res.body}`).toBe(410);
      expectProblem(res, 410, 'expired');
    }
    for (const id of [ids.pendingOld, ids.blocked]) {
      expectProblem(await readDecision(t, id, bearer(p.adminKey)), 410, 'expired');
      expectProblem(await readDecision(t, id, bearer(agentKey)), 410, 'expired');
      expectProblem(await approve(t, id, p.adminKey), 410, 'expired');
    }

    // A live policy is untouched by the purge, and an unknown decision is still a 404 for it.
    const read = await readDecision(t, liveDecision.decision.decisionId, bearer(live.adminKey));
    expect(read.statusCode, read.body).toBe(200);
    expect((await approve(t, liveDecision.decision.decisionId, live.adminKey)).statusCode).toBe(200);
    expectProblem(await readDecision(t, ids.approved, bearer(live.adminKey)), 404, 'not_found');
    expectProblem(await approve(t, ids.pending, live.adminKey), 404, 'not_found');

    // Purging again finds nothing more to do.
    expect((await purgeExpired(t.database, t.clock.now())).policies).toBe(0);
  });

  it('a purged policy stays 410 on every endpoint even if the clock steps back before its expiry', async () => {
    // The purge has run (the test above). A system clock set back (an NTP step, a restored VM)
    // must not turn the purged policy into a 404 for its own keys.
    t.clock.set(new Date(Date.parse(p.accessExpiresAt as string) - 1000));
    for (const [name, call] of everyEndpoint()) {
      const res = await call();
      expect(res.statusCode, `${name}: ${res.body}`).toBe(410);
    }
    for (const id of [ids.pendingOld, ids.blocked]) {
      expectProblem(await readDecision(t, id, bearer(p.adminKey)), 410, 'expired');
      expectProblem(await readDecision(t, id, bearer(agentKey)), 410, 'expired');
      expectProblem(await approve(t, id, p.adminKey), 410, 'expired');
    }
  });
});

describe('a change read before a purge and written after it', () => {
  const t = suiteFixture(() => createTestApp());

  /**
   * The purge (the CLI, or another instance whose clock is a little ahead) runs between a
   * request's read of the policy, which it passed a second before expiry, and its write. The
   * write must not land on the purged row: it answers 410, and the tombstone keeps no rules,
   * revision bump or new agent key. The spy only orders the steps; the real write runs.
   */
  it.each([
    ['PUT', 'replace', (c: Created) => putPolicy(t, c.policyId, { policy: rules({ dailyBudget: '500' }), name: 'revived' }, bearer(c.adminKey))],
    ['agent-key rotation', 'rotateAgentKey', (c: Created) => rotateAgentKey(t, c.policyId, c.adminKey)],
    ['admin-key rotation', 'rotateAdminKey', (c: Created) => rotateAdminKey(t, c.policyId, c.adminKey)],
  ] as const)('%s answers 410 and writes nothing', async (_name, method, call) => {
    t.clock.set(START);
    const c = await createPolicy(t);
    const expiry = Date.parse(c.accessExpiresAt as string);
    t.clock.set(new Date(expiry - 1000));
    const real = PolicyStore.prototype[method] as (...args: unknown[]) => Promise<unknown>;
    const spy = vi.spyOn(PolicyStore.prototype, method).mockImplementation(async function (this: PolicyStore, ...args: unknown[]) {
      expect((await purgeExpired(t.database, new Date(expiry + 1000))).policies).toBe(1);
      return real.apply(this, args);
    } as never);
    let res: Res;
    try {
      res = await call(c);
    } finally {
      spy.mockRestore();
    }
    expectProblem(res, 410, 'expired');
    const row = await t.database.db.selectFrom('policies').selectAll().where('id', '=', c.policyId).executeTakeFirstOrThrow();
    expect(Number(row.revision)).toBe(1);
    expect(row).toMatchObject({
      rules: '{}',
      name: '',
      agent_key_hash: createHash('sha256').update(c.agentKey).digest('hex'),
      admin_key_hash: createHash('sha256').update(c.adminKey).digest('hex'),
    });
    expect(row.purged_at).not.toBeNull();
    expectProblem(await getPolicy(t, c.policyId, bearer(c.adminKey)), 410, 'expired');
  });
});

describe('a change read just before the access ends and written at its end', () => {
  const t = suiteFixture(() => createTestApp());

  /**
   * No purge: the request reads the policy a millisecond before its access ends and writes at
   * exactly accessExpiresAt. The write's own access check must refuse it, and the refusal is
   * 410 (not a 412, 409 or 500 as if another write had got there first).
   */
  it.each([
    ['PUT', (c: Created) => putPolicy(t, c.policyId, { policy: rules({ dailyBudget: '500' }), name: 'revived' }, { ...bearer(c.adminKey), 'if-match': '"1"' })],
    ['agent-key rotation', (c: Created) => rotateAgentKey(t, c.policyId, c.adminKey)],
    ['admin-key rotation', (c: Created) => rotateAdminKey(t, c.policyId, c.adminKey)],
  ] as const)('%s written at exactly accessExpiresAt answers 410 and writes nothing', async (_name, call) => {
    t.clock.set(START);
    const c = await createPolicy(t);
    const expiry = Date.parse(c.accessExpiresAt as string);
    t.clock.set(new Date(expiry - 1));
    // The read's access check is the first look at the clock after the policy is read; the
    // access ends right after it.
    let armed = false;
    const realGet = PolicyStore.prototype.get;
    const getSpy = vi.spyOn(PolicyStore.prototype, 'get').mockImplementation(async function (this: PolicyStore, id: string) {
      const row = await realGet.call(this, id);
      armed = true;
      return row;
    });
    const realNow = t.clock.now.bind(t.clock);
    const nowSpy = vi.spyOn(t.clock, 'now').mockImplementation(() => {
      const now = realNow();
      if (armed) {
        armed = false;
        t.clock.set(new Date(expiry));
      }
      return now;
    });
    let res: Res;
    try {
      res = await call(c);
    } finally {
      getSpy.mockRestore();
      nowSpy.mockRestore();
    }
    expectProblem(res, 410, 'expired');
    const row = await t.database.db.selectFrom('policies').selectAll().where('id', '=', c.policyId).executeTakeFirstOrThrow();
    expect(Number(row.revision)).toBe(1);
    expect(row.name).not.toBe('revived');
    expect(row.agent_key_hash).toBe(createHash('sha256').update(c.agentKey).digest('hex'));
    expect(row.admin_key_hash).toBe(createHash('sha256').update(c.adminKey).digest('hex'));
    expect(row.purged_at).toBeNull();
  });
});

describe('purging a policy with a long history', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
    t.clock.set(START);
  });
  afterAll(async () => {
    await t.close();
  });

  it('deletes every decision and evidence chain over several chunks, and leaves a live policy alone', async () => {
    const gone = await createPolicy(t);
    const template = (await decide(t, gone, { amount: '1' })).decision.decisionId;
    const row = await t.database.db.selectFrom('decisions').selectAll().where('id', '=', template).executeTakeFirstOrThrow();
    const { seq: _seq, ...copy } = row;
    const decisions = 2 * PURGE_CHUNK_ROWS + 7;
    const chains = PURGE_CHUNK_ROWS + 3;
    for (let i = 1; i < decisions; i += 500) {
      const rows = Array.from({ length: Math.min(500, decisions - i) }, (_, k) => ({ ...copy, id: `dec_${String(i + k).padStart(32, '0')}`, request_id: `bulk-${i + k}` }));
      await t.database.db.insertInto('decisions').values(rows).execute();
    }
    for (let i = 0; i < chains; i += 500) {
      const ids = Array.from({ length: Math.min(500, chains - i) }, (_, k) => `ec_${String(i + k).padStart(32, '0')}`);
      await t.database.db.insertInto('evidence_chains').values(ids.map((id) => ({ id, policy_id: gone.policyId, request_id: id, decision_id: template, intent: '{}', intent_digest: 'x', created_at: START }))).execute();
      await t.database.db
        .insertInto('evidence_events')
        .values(ids.map((id) => ({ id: `ev_${id.slice(3)}`, chain_id: id, sequence: 1, event_type: 'INTENT_RECORDED', body: '{}', created_at: START, prev_hash: 'x', hash: 'y' })))
        .execute();
    }
    const count = async (table: 'decisions' | 'evidence_chains', policyId: string) =>
      Number((await t.database.db.selectFrom(table).select((eb) => eb.fn.countAll().as('n')).where('policy_id', '=', policyId).executeTakeFirstOrThrow()).n);
    expect(await count('decisions', gone.policyId)).toBe(decisions);

    t.clock.set(new Date(Date.parse(START) + RETENTION + DAY));
    const live2 = await createPolicy(t);
    const kept = (await decide(t, live2, { amount: '1' })).decision.decisionId;
    const result = await purgeExpired(t.database, t.clock.now());
    expect(result).toMatchObject({ policies: 1, evidenceChains: chains });
    expect(await count('decisions', gone.policyId)).toBe(0);
    expect(await count('evidence_chains', gone.policyId)).toBe(0);
    const events = await t.database.db.selectFrom('evidence_events').select('id').execute();
    expect(events).toEqual([]);
    expectProblem(await getPolicy(t, gone.policyId, bearer(gone.adminKey)), 410, 'expired');
    // The policy made since is untouched.
    expect((await readDecision(t, kept, bearer(live2.adminKey))).statusCode).toBe(200);
    expect(await count('decisions', live2.policyId)).toBe(1);
  });

  it('also deletes an evidence chain committed while the policy was being purged (none outlives its retention)', async () => {
    t.clock.set(START);
    const p = await createPolicy(t);
    t.clock.set(new Date(Date.parse(START) + RETENTION + DAY));
    // A request that passed the access check just before the expiry commits its chain after the
    // purge deleted the policy's chains, before the tombstone.
    const purge = PolicyStore.prototype.purge;
    const spy = vi.spyOn(PolicyStore.prototype, 'purge').mockImplementation(async function (this: PolicyStore, ...args) {
      await t.database.db.insertInto('evidence_chains').values({ id: 'ec_late', policy_id: p.policyId, request_id: 'late', decision_id: 'dec_x', intent: '{}', intent_digest: 'x', created_at: START }).execute();
      return purge.apply(this, args);
    });
    try {
      expect(await purgeExpired(t.database, t.clock.now())).toMatchObject({ policies: 1, evidenceChains: 1 });
    } finally {
      spy.mockRestore();
    }
    expect(await t.database.db.selectFrom('evidence_chains').select('id').where('policy_id', '=', p.policyId).execute()).toEqual([]);
  });
});

/**
 * A read of an approval that expired less than a minute ago waits for the policy's lock (see
 * DecisionService.read). If the policy's access ends and the purge removes the decision during
 * that wait, the read answers 410 like every other read of the policy, and the batch it shared
 * with an unrelated policy's decision still commits (it used to throw, failing both with 500).
 */
describe('a just-expired approval read while its policy is purged', () => {
  const t = suiteFixture(() => createTestApp());

  it('answers 410, and the decision batched with it is made', async () => {
    t.clock.set(START);
    const p = await createPolicy(t, { requireHumanAbove: '1' });
    const accessEnd = Date.parse(p.accessExpiresAt as string);
    // The approval request (one hour) expires 30 s before the policy's access ends.
    t.clock.set(new Date(accessEnd - 3_600_000 - 30_000));
    const other = await createPolicy(t); // its access lasts 30 more days
    const pending = await decide(t, p, { amount: '5' });
    expect(pending.decision.decision).toBe('HUMAN_APPROVAL');
    t.clock.set(new Date(accessEnd - 10_000)); // expired 20 s ago: the read waits for the lock
    const real = GroupCommitter.prototype.run;
    let otherDecision: Promise<Res> | undefined;
    const spy = vi.spyOn(GroupCommitter.prototype, 'run').mockImplementation(async function (this: GroupCommitter, ...args: Parameters<GroupCommitter['run']>) {
      spy.mockRestore();
      expect((await purgeExpired(t.database, new Date(accessEnd + 1))).policies).toBe(1);
      otherDecision = decideRaw(t, other, { amount: '1', requestId: 'batched-with-the-read' });
      await new Promise((r) => setImmediate(r));
      return real.apply(this, args) as never;
    } as never);
    let res: Res;
    try {
      res = await readDecision(t, pending.decision.decisionId, bearer(p.agentKey));
    } finally {
      spy.mockRestore();
    }
    expectProblem(res, 410, 'expired');
    const made = await otherDecision!;
    expect(made.statusCode, made.body).toBe(200);
    expect(json<{ decision: { decision: string } }>(made).decision.decision).toBe('APPROVE');
  });
});
