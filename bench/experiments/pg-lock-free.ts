/**
 * Prototype measurement, not product code: what a batch of protected decisions costs on
 * PostgreSQL, Node and PostgreSQL CPU per decision (all postgres processes, from /proc), by
 *   B. a transaction per batch, as the service does: BEGIN, lock the policies (FOR UPDATE),
 *      one read, one write, COMMIT: five round trips;
 *   C. lock-free: one read that also returns each policy row's xmin, and one autocommit write
 *      whose first CTE updates each policy row only if its xmin is still the one read (after
 *      waiting for a lock PostgreSQL re-checks that against the row as the other writer left
 *      it); everything else in the statement is written only if every policy passed, else the
 *      batch reads again: two round trips.
 * Batches of 1, 4 and 12 decisions on 2 lanes, each lane on policies of its own (so C never
 * conflicts here). See the session note of 2026-11-22 for the figures and for why C did not
 * land: instances of earlier versions lock with FOR UPDATE, which leaves xmin unchanged, so
 * during a rolling deploy C could not see their writes, and under contention between instances
 * most C batches conflicted.
 *   npx tsx bench/experiments/pg-lock-free.ts [seconds=4]
 * Uses BENCH_DATABASE_URL (default the local test database) in a schema of its own, dropped after.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { openDatabase } from '../../src/platform/db/database.js';
import { ReceiptSigner } from '../../src/platform/receipts.js';

const URL_ = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SECONDS = Number(process.argv[2] ?? 4);
const RECIPIENT = '0x1111111111111111111111111111111111111111';
function pgTicks(): number {
  let t = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (!s.includes('(postgres)')) continue;
      const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
      t += Number(f[11]) + Number(f[12]);
    } catch {}
  }
  return t * 10_000; // µs
}
const schema = `pgc_${randomBytes(3).toString('hex')}`;
const admin = new pg.Client({ connectionString: URL_ });
await admin.connect();
await admin.query(`create schema ${schema}`);
const database = await openDatabase(URL_, { pgSchema: schema });
const pool = new pg.Pool({ connectionString: URL_, max: 10, options: `-c search_path=${schema}` });
const store = new PolicyStore(database);
const policies: string[] = [];
for (let i = 0; i < 16; i++) {
  const { row } = await store.create({ name: `p${i}`, agentId: 'agent-bench', policy: { maxPerTransaction: '10', dailyBudget: '999999999999', requireHumanAbove: '10', maxRepeats: 1_000_000, allowedRecipients: [RECIPIENT], blockUnknownRecipients: true } }, new Date());
  policies.push(row.id);
}
const signer = ReceiptSigner.fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
let seq = 0;
// The guard locks the policies in id order, as the service's lock does. Every insert runs only if
// every policy passed, and the statement answers `ok` even when nothing was inserted.
const WRITE = (guard: boolean) => `with ${guard ? `guard as (
    update policies p set revision = p.revision from unnest($7::text[], $8::text[]) as g(id, v)
    where p.id = g.id and p.xmin = g.v::xid and p.id in (select id from policies where id = any($7::text[]) order by id for update)
    returning p.id),` : ''}
  ok as (select ${guard ? 'count(*) = cardinality($7::text[]) as ok from guard' : 'true as ok'}),
  ins as (
    insert into decisions (id, policy_id, request_id, agent_id, recipient, amount_micro, request_digest, decision, reasons, policy_revision, day, created_at, receipt)
    select id, policy_id, request_id, 'agent-bench', $5, 1000000, 'x', 'APPROVE', '[]', 1, $6, now()::text, receipt
    from unnest($1::text[], $2::text[], $3::text[], $4::text[]) as t(id, policy_id, request_id, receipt) where (select ok from ok) returning policy_id),
  spend as (
    insert into policy_day_spend (policy_id, day, spent_micro) select policy_id, $6, count(*) * 1000000 from ins group by policy_id
    on conflict (policy_id, day) do update set spent_micro = policy_day_spend.spent_micro + excluded.spent_micro),
  repeats as (
    insert into policy_day_repeats (policy_id, day, recipient, amount_micro, count) select policy_id, $6, $5, 1000000, count(*) from ins group by policy_id
    on conflict (policy_id, day, recipient, amount_micro) do update set count = policy_day_repeats.count + excluded.count)
  select ok from ok`;
const READ = `select p.*, p.xmin::text as v, (select d.id from decisions d where d.policy_id = t.policy_id and d.request_id = t.request_id) as existing,
  (select spent_micro from policy_day_spend s where s.policy_id = t.policy_id and s.day = $3) as spent,
  (select count from policy_day_repeats r where r.policy_id = t.policy_id and r.day = $3 and r.recipient = $4 and r.amount_micro = 1000000) as repeats
  from unnest($1::text[], $2::text[]) with ordinality as t(policy_id, request_id, n) left join policies p on p.id = t.policy_id order by t.n`;
const rowsOf = (reqs: Array<{ policyId: string; requestId: string }>) => reqs.map((r) => {
  const decision = { decisionId: `dec_${randomBytes(16).toString('hex')}`, policyId: r.policyId, requestId: r.requestId, amount: '1' };
  return { ...r, id: decision.decisionId, receipt: JSON.stringify(signer.sign('spend-decision', decision.decisionId, decision, new Date())) };
});
let conflicts = 0;
async function batch(mode: 'B' | 'C', reqs: Array<{ policyId: string; requestId: string }>): Promise<void> {
  const c = await pool.connect();
  const day = new Date().toISOString().slice(0, 10);
  try {
    if (mode === 'B') {
      await c.query('begin');
      await c.query({ name: 'lock', text: 'select id from policies where id = any($1::text[]) order by id for update', values: [[...new Set(reqs.map((r) => r.policyId))].sort()] });
    }
    for (;;) {
      const snap = await c.query({ name: 'read', text: READ, values: [reqs.map((r) => r.policyId), reqs.map((r) => r.requestId), day, RECIPIENT] });
      const rows = rowsOf(reqs);
      const vers = new Map<string, string>(snap.rows.map((r) => [r.id, r.v]));
      const values: unknown[] = [rows.map((r) => r.id), rows.map((r) => r.policyId), rows.map((r) => r.requestId), rows.map((r) => r.receipt), RECIPIENT, day];
      if (mode === 'C') values.push([...vers.keys()], [...vers.values()]);
      const w = await c.query({ name: `write${mode}`, text: WRITE(mode === 'C'), values });
      if (w.rows[0]?.ok !== true) { conflicts++; continue; }
      break;
    }
    if (mode === 'B') await c.query('commit');
  } catch (err) {
    if (mode === 'B') await c.query('rollback');
    throw err;
  } finally {
    c.release();
  }
}
async function run(mode: 'B' | 'C', size: number, lanes: number) {
  const end = Date.now() + SECONDS * 1000;
  const c0 = process.cpuUsage(); const p0 = pgTicks();
  const counts = await Promise.all(Array.from({ length: lanes }, async (_, lane) => {
    let n = 0;
    while (Date.now() < end) {
      // each lane uses its own policies, as the group commit's lanes do
      await batch(mode, Array.from({ length: size }, () => ({ policyId: policies[(lane + lanes * (seq++ % 8)) % 16]!, requestId: `r-${seq}` })));
      n += size;
    }
    return n;
  }));
  const n = counts.reduce((a, b) => a + b, 0);
  const c = process.cpuUsage(c0); const pgc = pgTicks() - p0;
  console.log(`${mode} batch ${size} x ${lanes}: ${Math.round(n / SECONDS)}/s, node ${Math.round((c.user + c.system) / n)} µs, pg ${Math.round(pgc / n)} µs per decision`);
}
try {
  for (let r = 0; r < 2; r++) for (const size of [1, 4, 12]) for (const mode of ['B', 'C'] as const) await run(mode, size, 2);
  console.log('conflicts', conflicts);
} finally {
  await pool.end(); await database.close(); await admin.query(`drop schema ${schema} cascade`); await admin.end();
}
