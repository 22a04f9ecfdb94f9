/**
 * Prototype measurement, not product code: protected decisions on PostgreSQL, in process (no
 * HTTP), by
 *   A. the service's path (DecisionService.decide: group commit on 2 lanes, per batch one read
 *      and one write for all its decisions, see decideMany), and
 *   B. the sketch it was built from: batches of 8 on 4 lanes, one read of every policy and
 *      total (`= any($1)`), one read of existing requestIds (`unnest`), and one statement that
 *      inserts every decision and adds to both day counters; a receipt is signed per decision
 *      as in A. B skips the rules and request digests (a few µs).
 *   npx tsx bench/experiments/pg-batch.ts [seconds=5] [rounds=2]
 * Uses BENCH_DATABASE_URL (default the local test database) in a schema of its own, dropped after.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import pg from 'pg';
import { DecisionService } from '../../src/features/spend-policy/decisions.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { GroupCommitter } from '../../src/platform/db/group-commit.js';
import { openDatabase } from '../../src/platform/db/database.js';
import { hashKey } from '../../src/platform/keys.js';
import { ReceiptSigner } from '../../src/platform/receipts.js';

const URL_ = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SECONDS = Number(process.argv[2] ?? 5);
const ROUNDS = Number(process.argv[3] ?? 2);
const RECIPIENT = '0x1111111111111111111111111111111111111111';
const BATCH = 8;
const LANES = 4;

// Batch sizes of path A, to explain its cost.
const sizes: number[] = [];
const proto = GroupCommitter.prototype as unknown as { commit(batch: unknown[]): Promise<void> };
const commit = proto.commit;
proto.commit = function (batch) {
  sizes.push(batch.length);
  return commit.call(this, batch);
};

const schema = `pgbatch_${randomBytes(3).toString('hex')}`;
const admin = new pg.Client({ connectionString: URL_ });
await admin.connect();
await admin.query(`create schema ${schema}`);
const database = await openDatabase(URL_, { pgSchema: schema });
const pool = new pg.Pool({ connectionString: URL_, max: 10, options: `-c search_path=${schema}` });
try {
  const store = new PolicyStore(database);
  const policies: Array<{ id: string; agentHash: string }> = [];
  for (let i = 0; i < 16; i++) {
    const { row, agentKey } = await store.create(
      {
        name: `p${i}`,
        agentId: 'agent-bench',
        policy: { maxPerTransaction: '10', dailyBudget: '999999999999', requireHumanAbove: '10', maxRepeats: 1_000_000, allowedRecipients: [RECIPIENT], blockUnknownRecipients: true },
      },
      new Date(),
    );
    policies.push({ id: row.id, agentHash: hashKey(agentKey) });
  }
  const signer = ReceiptSigner.fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
  const service = new DecisionService(database, signer, 3600);
  let seq = 0;

  const measure = async (run: (end: number) => Promise<number>) => {
    const c0 = process.cpuUsage();
    const n = await run(Date.now() + SECONDS * 1000);
    const c = process.cpuUsage(c0);
    return { perSecond: Math.round(n / SECONDS), nodeMicrosPerDecision: Math.round((c.user + c.system) / n) };
  };

  const pathA = (end: number) =>
    Promise.all(
      Array.from({ length: 32 }, async () => {
        let n = 0;
        while (Date.now() < end) {
          const p = policies[seq++ % policies.length]!;
          const req = { policyId: p.id, requestId: `a-${seq}`, agentId: 'agent-bench', chain: 'base' as const, asset: 'USDC' as const, recipient: RECIPIENT, amount: '1' };
          await service.decide(req, { kind: 'agent', hash: p.agentHash }, new Date());
          n++;
        }
        return n;
      }),
    ).then((counts) => counts.reduce((a, b) => a + b, 0));

  async function batchB(reqs: Array<{ policyId: string; requestId: string }>): Promise<void> {
    const c = await pool.connect();
    try {
      await c.query('begin');
      const day = new Date().toISOString().slice(0, 10);
      await c.query({
        name: 'snapshot',
        text: `select p.*, (select spent_micro from policy_day_spend s where s.policy_id = p.id and s.day = $2) as spent,
                 (select count from policy_day_repeats r where r.policy_id = p.id and r.day = $2 and r.recipient = $3 and r.amount_micro = 1000000) as repeats
               from policies p where p.id = any($1::text[]) order by p.id for update`,
        values: [[...new Set(reqs.map((r) => r.policyId))].sort(), day, RECIPIENT],
      });
      await c.query({
        name: 'existing',
        text: 'select policy_id, request_id from decisions where (policy_id, request_id) in (select * from unnest($1::text[], $2::text[]))',
        values: [reqs.map((r) => r.policyId), reqs.map((r) => r.requestId)],
      });
      const rows = reqs.map((r) => {
        const decision = { decisionId: `dec_${randomBytes(16).toString('hex')}`, policyId: r.policyId, requestId: r.requestId, amount: '1' };
        return { ...r, id: decision.decisionId, receipt: JSON.stringify(signer.sign('spend-decision', decision.decisionId, decision, new Date())) };
      });
      await c.query({
        name: 'write',
        text: `with ins as (
                 insert into decisions (id, policy_id, request_id, agent_id, recipient, amount_micro, request_digest, decision, reasons, policy_revision, day, created_at, receipt)
                 select id, policy_id, request_id, 'agent-bench', $5, 1000000, 'x', 'APPROVE', '[]', 1, $6, now()::text, receipt
                 from unnest($1::text[], $2::text[], $3::text[], $4::text[]) as t(id, policy_id, request_id, receipt) returning policy_id),
               spend as (
                 insert into policy_day_spend (policy_id, day, spent_micro) select policy_id, $6, count(*) * 1000000 from ins group by policy_id
                 on conflict (policy_id, day) do update set spent_micro = policy_day_spend.spent_micro + excluded.spent_micro)
               insert into policy_day_repeats (policy_id, day, recipient, amount_micro, count) select policy_id, $6, $5, 1000000, count(*) from ins group by policy_id
               on conflict (policy_id, day, recipient, amount_micro) do update set count = policy_day_repeats.count + excluded.count`,
        values: [rows.map((r) => r.id), rows.map((r) => r.policyId), rows.map((r) => r.requestId), rows.map((r) => r.receipt), RECIPIENT, day],
      });
      await c.query('commit');
    } catch (err) {
      await c.query('rollback');
      throw err;
    } finally {
      c.release();
    }
  }

  const pathB = (end: number) =>
    Promise.all(
      Array.from({ length: LANES }, async () => {
        let n = 0;
        while (Date.now() < end) {
          await batchB(Array.from({ length: BATCH }, () => ({ policyId: policies[seq++ % policies.length]!.id, requestId: `b-${seq}` })));
          n += BATCH;
        }
        return n;
      }),
    ).then((counts) => counts.reduce((a, b) => a + b, 0));

  for (let r = 0; r < ROUNDS; r++) {
    sizes.length = 0;
    const a = await measure(pathA);
    const meanBatch = (sizes.reduce((x, y) => x + y, 0) / sizes.length).toFixed(1);
    console.log(`A service path, 32 concurrent:   ${a.perSecond} decisions/s, ${a.nodeMicrosPerDecision} µs Node CPU each (mean batch ${meanBatch})`);
    const b = await measure(pathB);
    console.log(`B batch statements, ${BATCH} x ${LANES} lanes: ${b.perSecond} decisions/s, ${b.nodeMicrosPerDecision} µs Node CPU each`);
  }
} finally {
  await pool.end();
  await database.close();
  await admin.query(`drop schema ${schema} cascade`);
  await admin.end();
}
