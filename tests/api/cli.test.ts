import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import SQLite from 'better-sqlite3';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { run } from '../../src/cli.js';
import { purgeExpired } from '../../src/features/maintenance.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';

// The CLI reaches the database through DATABASE_URL; the per-run PostgreSQL schema of the test
// harness has no URL form, so the CLI is exercised on the SQLite run.
describe.skipIf(testDialect !== 'sqlite')('operator CLI', () => {
  let t: TestApp;
  let policy: { policyId: string; adminKey: string };
  const lines: string[] = [];
  const errors: string[] = [];
  const out = { log: (s: string) => lines.push(s), error: (s: string) => errors.push(s) };
  const cli = (...argv: string[]) => run(argv, out, { DATABASE_URL: t.database.url });

  let old: { policyId: string; adminKey: string };
  const create = async () =>
    json(
      await t.app.inject({
        method: 'POST',
        url: '/api/spendpolicy/policies',
        payload: {
          name: 'cli',
          agentId: 'agent-1',
          policy: { maxPerTransaction: '10', dailyBudget: '50', requireHumanAbove: '5', maxRepeats: 2, allowedRecipients: [ADDR.alice], blockUnknownRecipients: true },
        },
      }),
    );

  beforeAll(async () => {
    t = await createTestApp();
    // The CLI runs on the wall clock: `old` was created on the test clock's date, months ago, so
    // its pilot access has ended; `policy` is created now.
    old = await create();
    t.clock.set(new Date());
    policy = await create();
  });
  afterAll(async () => {
    await t.close();
  });

  const get = (p: { policyId: string; adminKey: string }) =>
    t.app.inject({ method: 'GET', url: `/api/spendpolicy/policies/${p.policyId}`, headers: { authorization: `Bearer ${p.adminKey}` } });
  const read = async () => json(await get(policy));

  it('turns direct checks on and off for a policy', async () => {
    expect((await read()).directChecks).toBe(false);
    expect(await cli('policy', 'direct-checks', policy.policyId, 'on')).toBe(0);
    expect((await read()).directChecks).toBe(true);
    expect(await cli('policy', 'direct-checks', policy.policyId, 'off')).toBe(0);
    expect((await read()).directChecks).toBe(false);
  });

  it('backs up a database the service keeps writing to: the copy ends, whole', async () => {
    // About 12 MB, so that a copy made a few pages at a time spans many of the service's writes.
    const needs = 'n'.repeat(1200);
    const lead = (i: number) => ({ id: `lead_fill_${i}`, email: 'fill@example.com', company: 'Fill', monthly_decisions: '10k-100k', needs, source: '192.0.2.1', created_at: new Date().toISOString() });
    await t.database.db.transaction().execute(async (tx) => {
      for (let i = 0; i < 10_000; i += 500) await tx.insertInto('pilot_leads').values(Array.from({ length: 500 }, (_, j) => lead(i + j))).execute();
    });
    let written = 0;
    const writer = setInterval(() => void t.database.db.insertInto('pilot_leads').values(lead(100_000 + written++)).execute(), 2);
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-backup-busy-'));
    try {
      const target = join(dir, 'busy.sqlite');
      const gaveUp = new Promise<string>((resolve) => setTimeout(() => resolve('still copying after 20 s'), 20_000).unref());
      expect(await Promise.race([cli('backup', target), gaveUp])).toBe(0);
      clearInterval(writer);
      const copy = new SQLite(target, { readonly: true, fileMustExist: true });
      try {
        expect(copy.pragma('integrity_check', { simple: true })).toBe('ok');
        expect(Number(copy.prepare("select count(*) from pilot_leads where id like 'lead_fill_%'").pluck().get())).toBeGreaterThanOrEqual(10_000);
      } finally {
        copy.close();
      }
    } finally {
      clearInterval(writer);
      await t.database.db.deleteFrom('pilot_leads').where('id', 'like', 'lead_fill_%').execute();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it('issues a new admin key for a locked-out administrator: printed once, the old key stops working', async () => {
    lines.length = 0;
    expect(await cli('policy', 'admin-key', policy.policyId)).toBe(0);
    const issued = JSON.parse(lines.join('\n')) as { policyId: string; adminKey: string };
    expect(issued.policyId).toBe(policy.policyId);
    expect((await get(policy)).statusCode).toBe(404);
    policy.adminKey = issued.adminKey;
    expect((await get(policy)).statusCode).toBe(200);
    errors.length = 0;
    expect(await cli('policy', 'admin-key', old.policyId)).toBe(1);
    expect(errors.join()).toContain('no longer accessible');
  });

  it('shows a policy without key hashes', async () => {
    lines.length = 0;
    expect(await cli('policy', 'show', policy.policyId)).toBe(0);
    const shown = JSON.parse(lines.join('\n'));
    expect(shown.policyId).toBe(policy.policyId);
    expect(JSON.stringify(shown)).not.toMatch(/hash|sgp_admin_|sgp_agent_/);
  });

  it('never creates a database: a DATABASE_URL naming no file is an error, and no file appears', async () => {
    const missing = join(tmpdir(), `paywarden-cli-${process.pid}-missing`, 'paywarden.sqlite');
    for (const argv of [['policy', 'show', policy.policyId], ['policy', 'direct-checks', policy.policyId, 'on'], ['purge']]) {
      errors.length = 0;
      expect(await run(argv, out, { DATABASE_URL: `sqlite:${missing}` })).toBe(1);
      expect(errors.join()).toContain(`no database at ${missing}`);
    }
    expect(existsSync(dirname(missing))).toBe(false);
  });

  it("refuses a file that is not the service's database (empty, another application's, an older schema) and makes no schema in it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-cli-foreign-'));
    try {
      const empty = join(dir, 'empty.sqlite');
      writeFileSync(empty, '');
      const foreign = join(dir, 'other.sqlite');
      const other = new SQLite(foreign);
      other.exec('create table invoices (id integer primary key, amount text)');
      other.close();
      const older = join(dir, 'older.sqlite');
      copyFileSync(t.database.url.slice('sqlite:'.length), older);
      const o = new SQLite(older);
      o.prepare('delete from kysely_migration where name = (select max(name) from kysely_migration)').run();
      o.close();
      for (const [file, why] of [[empty, 'no paywarden schema'], [foreign, 'no paywarden schema'], [older, 'older than this version']] as const) {
        for (const argv of [['purge'], ['policy', 'show', policy.policyId], ['policy', 'direct-checks', policy.policyId, 'on']]) {
          errors.length = 0;
          lines.length = 0;
          expect(await run(argv, out, { DATABASE_URL: `sqlite:${file}` })).toBe(1);
          expect(errors.join()).toContain(`not the service's database at ${file}: `);
          expect(errors.join()).toContain(why);
          expect(lines).toEqual([]);
        }
        const d = new SQLite(file, { readonly: true });
        const tables = d.prepare("select name from sqlite_master where type = 'table' and name = 'policies'").all();
        expect(d.pragma('journal_mode', { simple: true })).toBe(file === older ? 'wal' : 'delete');
        d.close();
        expect(tables).toHaveLength(file === older ? 1 : 0);
      }
      // Left as they were: the empty file empty, no WAL made beside another application's file.
      expect(statSync(empty).size).toBe(0);
      expect(readdirSync(dir).filter((f) => !f.startsWith('older')).sort()).toEqual(['empty.sqlite', 'other.sqlite']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('answers unknown policies and bad usage with a non-zero exit and a message', async () => {
    errors.length = 0;
    expect(await cli('policy', 'show', 'sgp_00000000000000000000000000000000')).toBe(1);
    expect(errors.join()).toContain('no policy');
    expect(await cli('policy', 'direct-checks', policy.policyId, 'maybe')).toBe(2);
    expect(await cli('frobnicate')).toBe(2);
  });

  it('withdraws a receipt key: the JWKS no longer lists it; an unknown kid is exit 1', async () => {
    const jwks = async () => json(await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' })).keys.map((k: { kid: string }) => k.kid);
    const [kid] = await jwks();
    errors.length = 0;
    expect(await cli('receipt-key', 'withdraw', 'no-such-kid')).toBe(1);
    expect(errors.join()).toContain('no receipt key no-such-kid');
    expect(await jwks()).toEqual([kid]);
    lines.length = 0;
    expect(await cli('receipt-key', 'withdraw', kid)).toBe(0);
    expect(lines.join()).toContain('it was the generated key, deleted');
    expect(await jwks()).toEqual([]);
  });

  it('backs up the SQLite database while the service runs: a private new file that holds its policies, never over an existing one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'paywarden-backup-'));
    try {
      const target = join(dir, 'backup.sqlite');
      expect(await cli('backup', target)).toBe(0);
      expect(statSync(target).mode & 0o777).toBe(0o600);
      expect(existsSync(`${target}-wal`)).toBe(false);
      // The copy is whole without its WAL: it is what a restore puts in place of the database.
      const copy = new SQLite(target, { readonly: true, fileMustExist: true });
      try {
        expect(copy.prepare('select id from policies where id = ?').get(policy.policyId)).toEqual({ id: policy.policyId });
        expect(copy.pragma('integrity_check', { simple: true })).toBe('ok');
      } finally {
        copy.close();
      }
      const size = statSync(target).size;
      errors.length = 0;
      expect(await cli('backup', target)).toBe(1);
      expect(errors.join()).toMatch(/EEXIST/);
      expect(statSync(target).size).toBe(size);
      expect(await run(['backup', join(dir, 'pg.sqlite')], out, { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/test' })).toBe(1);
      expect(errors.join()).toContain('pg_dump');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses to switch direct checks of a policy whose pilot access ended', async () => {
    errors.length = 0;
    expect(await cli('policy', 'direct-checks', old.policyId, 'on')).toBe(1);
    expect(errors.join()).toContain('no longer accessible');
    const row = await t.database.db.selectFrom('policies').select('direct_checks').where('id', '=', old.policyId).executeTakeFirstOrThrow();
    expect(Number(row.direct_checks)).toBe(0);
  });

  it('purges policies whose pilot access ended, which then answer 410', async () => {
    lines.length = 0;
    expect(await cli('purge')).toBe(0);
    expect(JSON.parse(lines[0]!)).toEqual({ leads: 0, policies: 1, orders: 0 });
    expect((await get(old)).statusCode).toBe(410);
    // Its switch is still refused once its data is purged; the current policy is untouched.
    expect(await cli('policy', 'direct-checks', old.policyId, 'off')).toBe(1);
    expect((await get(policy)).statusCode).toBe(200);
    expect(await cli('purge')).toBe(0);
    expect(JSON.parse(lines[1]!)).toEqual({ leads: 0, policies: 0, orders: 0 });
  });

  it('as a command (bin/paywarden.mjs), exits 0 once it has closed the database', async () => {
    // A cron job reads the exit code: closing the database must not end the process early
    // (Node's exit code 13, an unsettled top-level await) and so report a failure.
    const { stdout } = await promisify(execFile)(process.execPath, ['bin/paywarden.mjs', 'purge'], { env: { ...process.env, DATABASE_URL: t.database.url } });
    expect(JSON.parse(stdout)).toEqual({ leads: 0, policies: 0, orders: 0 });
  });
});

describe.skipIf(testDialect !== 'sqlite')('operator CLI racing a purge', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
    t.clock.set(new Date());
  });
  afterAll(() => t.close());

  it('direct-checks on a policy purged between its check and its write: exit 1, "no longer accessible", nothing written', async () => {
    const p = json(
      await t.app.inject({
        method: 'POST',
        url: '/api/spendpolicy/policies',
        payload: { name: 'n', agentId: 'a', policy: { maxPerTransaction: '10', dailyBudget: '50', requireHumanAbove: '5', maxRepeats: 2, allowedRecipients: [ADDR.alice], blockUnknownRecipients: true } },
      }),
    );
    const errors: string[] = [];
    const real = PolicyStore.prototype.setDirectChecks;
    // Another instance (its clock ahead), or an operator's purge, runs between the two steps.
    const spy = vi.spyOn(PolicyStore.prototype, 'setDirectChecks').mockImplementation(async function (this: PolicyStore, id, on, now) {
      await t.database.db.updateTable('policies').set({ access_expires_at: new Date(Date.now() - 1000).toISOString() }).where('id', '=', id).execute();
      await purgeExpired(t.database, new Date());
      return real.call(this, id, on, now);
    });
    try {
      expect(await run(['policy', 'direct-checks', p.policyId, 'on'], { log: () => {}, error: (s) => errors.push(s) }, { DATABASE_URL: t.database.url })).toBe(1);
    } finally {
      spy.mockRestore();
    }
    expect(errors.join()).toContain('no longer accessible');
    const row = await t.database.db.selectFrom('policies').select('direct_checks').where('id', '=', p.policyId).executeTakeFirstOrThrow();
    expect(Number(row.direct_checks)).toBe(0);
  });
});
