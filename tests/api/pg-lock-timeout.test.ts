// A policy row held by someone outside the service (an operator's open transaction) past the lock
// timeout fails that policy's decisions with 503, and only those: another policy's decisions that
// shared the group commit's batch with them are decided. PostgreSQL only (SQLite has no row locks).
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { sharedDatabase, testDialect } from '../helpers/db.js';
import { expectProblem } from '../helpers/problems.js';
import { createPolicy, decideRaw, listDecisions, rid, type Created } from '../helpers/policies.js';

/** GroupCommitter's lane of a policy (two lanes): policies of one lane share its batches. */
const laneOf = (id: string) => {
  let h = 0;
  for (let i = 0; i < id.length; i++) h = (h * 31 + id.charCodeAt(i)) >>> 0;
  return h % 2;
};

/**
 * Runs `body` with an app whose lock timeout is 1 s (`s`), a PostgreSQL session of its own that
 * can hold policy rows (`holder`, which the test begins), and `inLane`, a new policy that shares
 * the lane (and so the batches) of another.
 */
async function withHolder(body: (s: TestApp, holder: pg.Client, inLane: (of: Created) => Promise<Created>) => Promise<void>) {
  const t = await createTestApp();
  const quick = await sharedDatabase(t.database, { pgLockTimeoutMs: 1_000 });
  const s = await createTestApp({ database: quick });
  const holder = new pg.Client({ connectionString: t.database.url, options: `-c search_path=${t.database.pgSchema}` });
  await holder.connect();
  const inLane = async (of: Created) => {
    let p = await createPolicy(s);
    while (laneOf(p.policyId) !== laneOf(of.policyId)) p = await createPolicy(s);
    return p;
  };
  try {
    await body(s, holder, inLane);
  } finally {
    await holder.query('rollback').catch(() => {});
    await holder.end();
    await s.close();
    await quick.close();
    await t.close();
  }
}

/** Sends a request of `held` then, 100 ms later, one of `free`: `free`'s must be answered first. */
async function answeredBefore(s: TestApp, free: Created, held: Created) {
  const order: string[] = [];
  const heldAgain = decideRaw(s, held, { amount: '1' }).then((r) => (order.push('held'), r));
  await new Promise((resolve) => setTimeout(resolve, 100));
  const freeAgain = decideRaw(s, free, { amount: '1' }).then((r) => (order.push('free'), r));
  expect((await freeAgain).statusCode).toBe(200);
  expectProblem(await heldAgain, 503, 'storage_unavailable');
  expect(order).toEqual(['free', 'held']);
}

describe.skipIf(testDialect !== 'postgres')('a policy row locked outside the service', () => {
  it('fails its own decisions with 503, not those of another policy in the same batch, and then stops holding them up', async () => {
    await withHolder(async (s, holder, inLane) => {
      const p = await createPolicy(s);
      const q = await inLane(p);
      await holder.query('begin');
      await holder.query('select id from policies where id = $1 for update', [p.policyId]);

      // The first request of p occupies the lane while it waits for the lock; the next two queue
      // behind it and share the next batch.
      const first = decideRaw(s, p, { amount: '1' });
      await new Promise((resolve) => setTimeout(resolve, 300));
      const pRequestId = rid('p');
      const qRequestId = rid('q');
      const [rFirst, rp, rq] = await Promise.all([first, decideRaw(s, p, { requestId: pRequestId, amount: '1' }), decideRaw(s, q, { requestId: qRequestId, amount: '1' })]);
      expectProblem(rFirst, 503, 'storage_unavailable');
      expectProblem(rp, 503, 'storage_unavailable');
      expect(rq.statusCode, rq.body).toBe(200);
      expect(json(rq).decision.decision).toBe('APPROVE');

      // While p stays held, its next request waits out the lock timeout in a lane of its own:
      // q's request, sent after it, is answered first.
      await answeredBefore(s, q, p);

      // The same for a policy whose request failed alone in its batch.
      const r = await inLane(q);
      await holder.query('select id from policies where id = $1 for update', [r.policyId]);
      expectProblem(await decideRaw(s, r, { amount: '1' }), 503, 'storage_unavailable');
      await answeredBefore(s, q, r);

      await holder.query('rollback');
      // Nothing was lost or made twice: q's request replays its one decision, p's retry is decided now.
      const replay = json(await decideRaw(s, q, { requestId: qRequestId, amount: '1' }));
      expect(replay.decision.decisionId).toBe(json(rq).decision.decisionId);
      const retried = await decideRaw(s, p, { requestId: pRequestId, amount: '1' });
      expect(retried.statusCode, retried.body).toBe(200);
      expect(json(await listDecisions(s, p.policyId, p.adminKey)).items).toHaveLength(1);
      expect(json(await listDecisions(s, q.policyId, q.adminKey)).items).toHaveLength(3);
    });
  });

  it('sends a policy first found held in a batch shared with another to a lane of its own too', async () => {
    await withHolder(async (s, holder, inLane) => {
      const o = await createPolicy(s);
      const p = await inLane(o);
      const q = await inLane(o);
      await holder.query('begin');
      await holder.query('select id from policies where id = any($1) for update', [[o.policyId, p.policyId]]);

      // o's request occupies the lane while it waits for its lock; p's first request and q's queue
      // behind it and share the next batch, where p is found held for the first time.
      const first = decideRaw(s, o, { amount: '1' });
      await new Promise((resolve) => setTimeout(resolve, 300));
      const [rFirst, rp, rq] = await Promise.all([first, decideRaw(s, p, { amount: '1' }), decideRaw(s, q, { amount: '1' })]);
      expectProblem(rFirst, 503, 'storage_unavailable');
      expectProblem(rp, 503, 'storage_unavailable');
      expect(rq.statusCode, rq.body).toBe(200);

      // p's next request waits out the lock timeout apart: q's, sent after it, is answered first.
      await answeredBefore(s, q, p);
    });
  });
});
