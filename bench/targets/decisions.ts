import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { sql } from 'kysely';
import { buildApp } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { openInfrastructure } from '../../src/platform/deps.js';
import { injectWith, type RunningTarget } from '../lib/types.js';

const RECIPIENT = '0x1111111111111111111111111111111111111111';
const POLICIES = Number(process.env.BENCH_POLICIES ?? 16);
/** Decisions stored before the run (BENCH_PREFILL), to show that history does not slow a decision. */
const PREFILL = Number(process.env.BENCH_PREFILL ?? 0);

/**
 * The real service deciding for several agents' policies at once: every request is a fresh
 * requestId (autocannon's [<id>]), so each one is a durable write that reads the day's budget
 * and repeat totals and commits (SQLite synchronous=FULL, or PostgreSQL).
 */
export async function startDecisions(dialect: 'sqlite' | 'postgres'): Promise<RunningTarget> {
  let databaseUrl: string;
  let cleanup: () => Promise<void>;
  if (dialect === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-bench-'));
    databaseUrl = `sqlite:${join(dir, 'bench.sqlite')}`;
    cleanup = async () => rmSync(dir, { recursive: true, force: true });
  } else {
    // A database of its own, dropped afterwards, on the server named by BENCH_DATABASE_URL.
    const admin = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
    const name = `paywarden_bench_${randomBytes(4).toString('hex')}`;
    const c = new pg.Client({ connectionString: admin });
    await c.connect();
    await c.query(`create database ${name}`);
    await c.end();
    const url = new URL(admin);
    url.pathname = `/${name}`;
    databaseUrl = url.toString();
    cleanup = async () => {
      const d = new pg.Client({ connectionString: admin });
      await d.connect();
      await d.query(`drop database if exists ${name} with (force)`);
      await d.end();
    };
  }
  const config = testConfig({ databaseUrl, rateLimits: false, logLevel: process.env.BENCH_LOG_LEVEL ?? 'silent' });
  const infra = await openInfrastructure(config);
  const app = await buildApp(infra);
  await app.ready();

  const policies: Array<{ policyId: string; agentKey: string }> = [];
  for (let i = 0; i < POLICIES; i++) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/spendpolicy/policies',
      payload: {
        name: `bench-${i}`,
        agentId: 'agent-bench',
        policy: { maxPerTransaction: '10', dailyBudget: '999999999999', requireHumanAbove: '10', maxRepeats: 1_000_000, allowedRecipients: [RECIPIENT], blockUnknownRecipients: true },
      },
    });
    policies.push(JSON.parse(res.body));
  }
  if (PREFILL > 0) await prefill(infra.database, policies[0]!.policyId, PREFILL);

  return {
    listen: (opts) => app.listen(opts),
    inject: injectWith(app),
    load: {
      description: `POST /api/spendpolicy/decisions (${dialect}, ${POLICIES} policies, fresh requestId each, ${PREFILL} decisions stored before)`,
      idReplacement: true,
      requests: policies.map((p) => ({
        method: 'POST' as const,
        path: '/api/spendpolicy/decisions',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${p.agentKey}` },
        body: JSON.stringify({ policyId: p.policyId, requestId: 'bench-[<id>]', agentId: 'agent-bench', chain: 'base', asset: 'USDC', recipient: RECIPIENT, amount: '1' }),
      })),
      expectStatus: 200,
      expectBodyIncludes: '"decision":"APPROVE"',
    },
    async close() {
      await app.close();
      await infra.close();
      await cleanup();
    },
  };
}

/** Stored history: `count` decisions spread over the past year (not today's totals). */
async function prefill(database: Awaited<ReturnType<typeof openInfrastructure>>['database'], policyId: string, count: number): Promise<void> {
  const batch = 5000;
  for (let start = 0; start < count; start += batch) {
    const rows = Array.from({ length: Math.min(batch, count - start) }, (_, k) => {
      const i = start + k;
      const day = new Date(Date.UTC(2025, 0, 1) + (i % 365) * 86_400_000).toISOString();
      return {
        id: `dec_${i.toString(16).padStart(32, '0')}`,
        policy_id: policyId,
        request_id: `prefill-${i}`,
        agent_id: 'agent-bench',
        recipient: RECIPIENT,
        amount_micro: 1_000_000n,
        request_digest: 'sha256:prefill',
        decision: 'APPROVE',
        reasons: '[]',
        policy_revision: 1,
        day: day.slice(0, 10),
        approval_status: null,
        approval_expires_at: null,
        approved_at: null,
        approval_note: null,
        created_at: day,
        receipt: '{}',
      };
    });
    await database.db.transaction().execute(async (tx) => {
      // SQLite allows 32766 parameters per statement: 17 columns x 1000 rows fits.
      for (let i = 0; i < rows.length; i += 1000) await tx.insertInto('decisions').values(rows.slice(i, i + 1000)).execute();
    });
  }
  // A bulk load of a million rows sets PostgreSQL's autovacuum off (its insert threshold), and a
  // vacuum of the whole table during the measured runs is not what a service whose history grew
  // over months sees: vacuum now, so the runs measure the decisions alone.
  if (database.dialect === 'postgres') await sql`vacuum (analyze) decisions`.execute(database.db);
}
