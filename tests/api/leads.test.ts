import { existsSync, readFileSync } from 'node:fs';
import SQLite from 'better-sqlite3';
import { beforeEach, describe, expect, it } from 'vitest';
import { sqliteFileOf } from '../../src/platform/db/database.js';
import { testDialect } from '../helpers/db.js';
import { purgeExpired } from '../../src/features/maintenance.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import { suiteFixture } from '../helpers/suite.js';

const DAY = 86_400_000;

function validLead(): Record<string, any> {
  return {
    email: 'ops@example.com',
    company: 'Example Ltd',
    monthlyDecisions: '10k-100k',
    needs: 'Bounded spending for our purchasing agents.',
  };
}

/** One app for the enclosing describe block, with no pilot leads stored at the start of each test. */
function useLeadsApp(): TestApp {
  const t = suiteFixture(() => createTestApp());
  beforeEach(async () => {
    await t.database.db.deleteFrom('pilot_leads').execute();
  });
  return t;
}

describe('POST /api/pilot-leads', () => {
  const t = useLeadsApp();

  const send = (body: unknown, remoteAddress = '198.51.100.1') =>
    t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: body as object, remoteAddress });
  const rows = () => t.database.db.selectFrom('pilot_leads').selectAll().orderBy('seq').execute();

  it('answers 201 { id, status: "received" } and stores the lead', async () => {
    t.clock.set('2026-02-01T10:00:00.000Z');
    const res = await send(validLead(), '198.51.100.77');
    expect(res.statusCode).toBe(201);
    const body = json(res);
    expect(Object.keys(body).sort()).toEqual(['id', 'status']);
    expect(body.id).toMatch(/^lead_[0-9a-f]{32}$/);
    expect(body.status).toBe('received');

    const stored = await rows();
    expect(stored).toHaveLength(1);
    expect(stored[0]).toMatchObject({
      id: body.id,
      email: 'ops@example.com',
      company: 'Example Ltd',
      monthly_decisions: '10k-100k',
      needs: 'Bounded spending for our purchasing agents.',
      source: '198.51.100.77',
      created_at: '2026-02-01T10:00:00.000Z',
    });
  });

  it('gives every lead its own id', async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 5; i++) ids.add(json(await send(validLead())).id);
    expect(ids.size).toBe(5);
    expect(await rows()).toHaveLength(5);
  });

  it.each(['under-1k', '1k-10k', '10k-100k', 'over-100k', 'not-sure'])('accepts monthlyDecisions %s', async (v) => {
    expect((await send({ ...validLead(), monthlyDecisions: v })).statusCode).toBe(201);
  });

  it('accepts the boundaries: company of 120 characters, needs of 10 and of 1200', async () => {
    expect((await send({ ...validLead(), company: 'c'.repeat(120) })).statusCode).toBe(201);
    expect((await send({ ...validLead(), needs: 'n'.repeat(10) })).statusCode).toBe(201);
    expect((await send({ ...validLead(), needs: 'n'.repeat(1200) })).statusCode).toBe(201);
    // lengths are characters, not bytes or UTF-16 units
    expect((await send({ ...validLead(), company: '\u{1F3E2}'.repeat(120) })).statusCode).toBe(201);
    expect((await send({ ...validLead(), needs: '\u00e9'.repeat(10) })).statusCode).toBe(201);
  });

  type Case = [name: string, body: Record<string, unknown>, path: string];
  const without = (k: string) => {
    const b = validLead();
    delete b[k];
    return b;
  };
  const cases: Case[] = [
    ['email without @', { ...validLead(), email: 'ops.example.com' }, 'body/email'],
    ['email without domain', { ...validLead(), email: 'ops@' }, 'body/email'],
    ['email with spaces', { ...validLead(), email: 'o ps@example.com' }, 'body/email'],
    ['email empty', { ...validLead(), email: '' }, 'body/email'],
    ['email a number', { ...validLead(), email: 42 }, 'body/email'],
    ['email with two @', { ...validLead(), email: 'a@b@example.com' }, 'body/email'],
    ['company of 121 characters', { ...validLead(), company: 'c'.repeat(121) }, 'body/company'],
    ['company of 121 emoji', { ...validLead(), company: '\u{1F3E2}'.repeat(121) }, 'body/company'],
    ['company not a string', { ...validLead(), company: ['Example'] }, 'body/company'],
    ['company with a NUL character', { ...validLead(), company: 'Example\u0000 Ltd' }, 'body/company'],
    ['needs with a lone surrogate', { ...validLead(), needs: 'decisions \udc00 for agents' }, 'body/needs'],
    ['monthlyDecisions not in the enum', { ...validLead(), monthlyDecisions: '100' }, 'body/monthlyDecisions'],
    ['monthlyDecisions in another case', { ...validLead(), monthlyDecisions: 'Under-1k' }, 'body/monthlyDecisions'],
    ['monthlyDecisions a number', { ...validLead(), monthlyDecisions: 1000 }, 'body/monthlyDecisions'],
    ['needs of 9 characters', { ...validLead(), needs: 'n'.repeat(9) }, 'body/needs'],
    ['needs of 1201 characters', { ...validLead(), needs: 'n'.repeat(1201) }, 'body/needs'],
    ['needs empty', { ...validLead(), needs: '' }, 'body/needs'],
    ['needs null', { ...validLead(), needs: null }, 'body/needs'],
    ['extra property', { ...validLead(), phone: '+1 555 0100' }, 'body/phone'],
    ['missing email', without('email'), 'body/email'],
    ['missing company', without('company'), 'body/company'],
    ['missing monthlyDecisions', without('monthlyDecisions'), 'body/monthlyDecisions'],
    ['missing needs', without('needs'), 'body/needs'],
  ];

  it.each(cases)('%s is a 400 and nothing is stored', async (_name, body, path) => {
    expectInvalid(await send(body), path);
    expect(await rows()).toHaveLength(0);
  });

  it('malformed JSON, a non-object body and a wrong content type are 4xx problems', async () => {
    const raw = (payload: string, type: string) =>
      t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload, headers: { 'content-type': type } });
    expectProblem(await raw('{"email":', 'application/json'), 400, 'malformed_json');
    expectInvalid(await raw('[]', 'application/json'), 'body');
    expectProblem(await raw(JSON.stringify(validLead()), 'text/plain'), 415, 'unsupported_media_type');
    expectProblem(await raw(JSON.stringify({ ...validLead(), needs: 'n'.repeat(70_000) }), 'application/json'), 413, 'payload_too_large');
    expect(await rows()).toHaveLength(0);
  });
});

describe('pilot-lead retention', () => {
  const t = useLeadsApp();

  const submit = async (company: string, email = validLead().email) => {
    const res = await t.app.inject({ method: 'POST', url: '/api/pilot-leads', payload: { ...validLead(), company, email } });
    expect(res.statusCode).toBe(201);
    return json(res).id as string;
  };
  const remaining = async () =>
    (await t.database.db.selectFrom('pilot_leads').select(['id', 'company']).orderBy('seq').execute()).map((r) => r.company);

  it('deletes exactly the leads older than 90 days', async () => {
    const start = new Date('2026-01-01T00:00:00.000Z');
    t.clock.set(start);
    await submit('day-0');
    t.clock.advance(DAY);
    await submit('day-1');
    t.clock.advance(9 * DAY);
    await submit('day-10');
    t.clock.set(new Date(start.getTime() + 45 * DAY));
    await submit('day-45');
    t.clock.set(new Date(start.getTime() + 90 * DAY));
    await submit('day-90');

    // 90 days and 1 ms after day 0: only the first lead has passed its retention.
    const at1 = new Date(start.getTime() + 90 * DAY + 1);
    expect((await purgeExpired(t.database, at1)).leads).toBe(1);
    expect(await remaining()).toEqual(['day-1', 'day-10', 'day-45', 'day-90']);

    // Purging again at the same time deletes nothing more.
    expect((await purgeExpired(t.database, at1)).leads).toBe(0);

    // A lead exactly 90 days old is kept; a millisecond later it goes.
    const at2 = new Date(start.getTime() + 91 * DAY);
    expect((await purgeExpired(t.database, at2)).leads).toBe(0);
    expect(await remaining()).toEqual(['day-1', 'day-10', 'day-45', 'day-90']);
    expect((await purgeExpired(t.database, new Date(at2.getTime() + 1))).leads).toBe(1);
    expect(await remaining()).toEqual(['day-10', 'day-45', 'day-90']);

    // 140 days after the start, everything older than day 50 goes.
    expect((await purgeExpired(t.database, new Date(start.getTime() + 140 * DAY))).leads).toBe(2);
    expect(await remaining()).toEqual(['day-90']);

    // and in the far future, nothing is left
    expect((await purgeExpired(t.database, new Date(start.getTime() + 1000 * DAY))).leads).toBe(1);
    expect(await remaining()).toEqual([]);
  });

  it.skipIf(testDialect !== 'sqlite')('a purged lead leaves no trace of its email in the SQLite file or its WAL', async () => {
    const file = sqliteFileOf(t.database.url)!;
    const checkpoint = () => {
      const other = new SQLite(file);
      try {
        other.pragma('wal_checkpoint(TRUNCATE)');
      } finally {
        other.close();
      }
    };
    const bytes = () => Buffer.concat([readFileSync(file), existsSync(`${file}-wal`) ? readFileSync(`${file}-wal`) : Buffer.alloc(0)]);
    const email = `forget-me-${Date.now()}@example.com`;
    t.clock.set(new Date('2026-01-01T00:00:00.000Z'));
    await submit('forgotten', email);
    checkpoint();
    expect(bytes().includes(email)).toBe(true);
    expect((await purgeExpired(t.database, new Date('2026-06-01T00:00:00.000Z'))).leads).toBe(1);
    checkpoint();
    expect(bytes().includes(email)).toBe(false);
  });

  it('purging with the clock before every lead deletes nothing', async () => {
    t.clock.set('2026-06-01T00:00:00.000Z');
    await submit('june');
    expect((await purgeExpired(t.database, new Date('2026-06-01T00:00:00.000Z'))).leads).toBe(0);
    expect((await purgeExpired(t.database, new Date('2026-08-30T00:00:00.000Z'))).leads).toBe(0);
    expect(await remaining()).toEqual(['june']);
  });
});
