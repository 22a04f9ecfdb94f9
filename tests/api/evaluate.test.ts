import type { InjectOptions } from 'fastify';
import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';

const URL = '/api/spendpolicy/evaluate';

function validBody(): Record<string, any> {
  return {
    agentId: 'agent-7',
    requestId: 'req-0001',
    chain: 'base',
    asset: 'USDC',
    recipient: ADDR.alice,
    amount: '10',
    policy: {
      maxPerTransaction: '100',
      remainingDailyBudget: '500',
      requireHumanAbove: '50',
      maxRepeats: 3,
      allowedRecipients: [ADDR.alice, ADDR.bob],
      blockUnknownRecipients: true,
    },
    context: { repeatCount: 0, proofDecision: 'ALLOW' },
  };
}

const OPTIONAL_CHECKS = [
  {
    check: 'transaction-preflight',
    method: 'POST',
    endpoint: '/api/transaction-preflight',
    price: '0.05',
    asset: 'USDC',
    network: 'eip155:8453',
    invoked: false,
    charged: false,
  },
  {
    check: 'token-risk',
    method: 'POST',
    endpoint: '/api/token-risk',
    price: '0.25',
    asset: 'USDC',
    network: 'eip155:8453',
    invoked: false,
    charged: false,
  },
];

describe('POST /api/spendpolicy/evaluate', () => {
  let t: TestApp;
  const statuses: number[] = [];

  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(async () => {
    await t.close();
  });
  afterEach(() => {
    // Whatever a test sent, the service never answered with a 5xx.
    expect(statuses.filter((s) => s >= 500)).toEqual([]);
    statuses.length = 0;
  });

  async function inject(opts: InjectOptions) {
    const res = await t.app.inject(opts);
    statuses.push(res.statusCode);
    return res;
  }
  const post = (body: unknown) => inject({ method: 'POST', url: URL, payload: body as object });
  const postRaw = (payload: string | Buffer, contentType?: string) =>
    inject({ method: 'POST', url: URL, payload, headers: contentType ? { 'content-type': contentType } : {} });

  describe('decisions', () => {
    it('APPROVE: answers the full advisory response', async () => {
      const res = await post(validBody());
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(json(res)).toEqual({
        decision: 'APPROVE',
        reasons: [],
        advisory: true,
        enforced: false,
        executionAuthorized: false,
        automaticPayment: false,
        agentId: 'agent-7',
        requestId: 'req-0001',
        evaluatedAt: t.clock.now().toISOString(),
        optionalChecks: OPTIONAL_CHECKS,
      });
    });

    it('HUMAN_APPROVAL: an amount above requireHumanAbove', async () => {
      const body = validBody();
      body.amount = '50.000001';
      const res = json(await post(body));
      expect(res.decision).toBe('HUMAN_APPROVAL');
      expect(res.reasons).toEqual(['above_human_threshold']);
      expect(res.executionAuthorized).toBe(false);
      expect(res.automaticPayment).toBe(false);
      expect(res.advisory).toBe(true);
      expect(res.enforced).toBe(false);
      expect(res.optionalChecks).toEqual(OPTIONAL_CHECKS);
    });

    it('BLOCK: lists every reason that applies, blocking ones first', async () => {
      const body = validBody();
      body.amount = '600';
      body.recipient = ADDR.carol;
      body.context = { repeatCount: 3, proofDecision: 'WARN' };
      const res = json(await post(body));
      expect(res.decision).toBe('BLOCK');
      expect(res.reasons).toEqual([
        'exceeds_max_per_transaction',
        'exceeds_daily_budget',
        'recipient_not_allowed',
        'repeat_limit_reached',
        'above_human_threshold',
        'proof_inconclusive',
      ]);
      expect(res.executionAuthorized).toBe(false);
      expect(res.automaticPayment).toBe(false);
      expect(res.optionalChecks).toEqual(OPTIONAL_CHECKS);
    });

    it('the evaluation time comes from the clock', async () => {
      t.clock.set('2026-03-01T08:30:00.000Z');
      expect(json(await post(validBody())).evaluatedAt).toBe('2026-03-01T08:30:00.000Z');
    });

    it('amounts equal to the limits are within them; one micro-USDC more is not', async () => {
      const at = validBody();
      at.amount = '50';
      at.policy.requireHumanAbove = '50.000000';
      expect(json(await post(at))).toMatchObject({ decision: 'APPROVE', reasons: [] });

      const max = validBody();
      max.amount = '100.000000';
      max.policy.requireHumanAbove = '1000';
      max.policy.remainingDailyBudget = '100';
      expect(json(await post(max))).toMatchObject({ decision: 'APPROVE', reasons: [] });
      max.amount = '100.000001';
      expect(json(await post(max))).toMatchObject({ decision: 'BLOCK', reasons: ['exceeds_max_per_transaction', 'exceeds_daily_budget'] });
    });

    it('compares recipient addresses case-insensitively', async () => {
      const body = validBody();
      body.recipient = ADDR.mixedCase.toLowerCase();
      body.policy.allowedRecipients = [ADDR.mixedCase];
      expect(json(await post(body))).toMatchObject({ decision: 'APPROVE', reasons: [] });
      body.recipient = ADDR.mixedCase.toUpperCase().replace(/^0X/, '0x');
      expect(json(await post(body))).toMatchObject({ decision: 'APPROVE', reasons: [] });
    });

    it('an empty allowedRecipients blocks or asks a human depending on blockUnknownRecipients', async () => {
      const body = validBody();
      body.policy.allowedRecipients = [];
      body.policy.blockUnknownRecipients = true;
      expect(json(await post(body))).toMatchObject({ decision: 'BLOCK', reasons: ['recipient_not_allowed'] });
      body.policy.blockUnknownRecipients = false;
      expect(json(await post(body))).toMatchObject({ decision: 'HUMAN_APPROVAL', reasons: ['recipient_unknown'] });
    });

    it('context is optional: without it there are no repeats and no proof', async () => {
      const body = validBody();
      delete body.context;
      expect(json(await post(body))).toMatchObject({ decision: 'APPROVE', reasons: [] });
      body.context = {};
      expect(json(await post(body))).toMatchObject({ decision: 'APPROVE', reasons: [] });
    });

    it('repeatCount = maxRepeats - 1 is within; = maxRepeats blocks', async () => {
      const body = validBody();
      body.context = { repeatCount: 2 };
      expect(json(await post(body))).toMatchObject({ decision: 'APPROVE' });
      body.context = { repeatCount: 3 };
      expect(json(await post(body))).toMatchObject({ decision: 'BLOCK', reasons: ['repeat_limit_reached'] });
    });

    it.each([
      ['BLOCK', 'BLOCK', ['proof_blocked']],
      ['WARN', 'HUMAN_APPROVAL', ['proof_inconclusive']],
      ['INCOMPLETE', 'HUMAN_APPROVAL', ['proof_inconclusive']],
      ['UNKNOWN', 'HUMAN_APPROVAL', ['proof_inconclusive']],
      ['ALLOW', 'APPROVE', []],
    ])('proofDecision %s gives %s', async (proofDecision, decision, reasons) => {
      const body = validBody();
      body.context = { proofDecision };
      expect(json(await post(body))).toMatchObject({ decision, reasons });
    });

    it('reads amounts with leading zeros and up to six fractional digits exactly', async () => {
      const body = validBody();
      body.amount = '0050.000000';
      expect(json(await post(body))).toMatchObject({ decision: 'APPROVE' });
      body.amount = '0.000001';
      body.policy.maxPerTransaction = '0.000001';
      body.policy.remainingDailyBudget = '0.000001';
      body.policy.requireHumanAbove = '0';
      expect(json(await post(body))).toMatchObject({ decision: 'HUMAN_APPROVAL', reasons: ['above_human_threshold'] });
    });

    it('handles the largest amounts (12 integer digits, 6 fractional) without rounding', async () => {
      const body = validBody();
      body.amount = '999999999999.999999';
      body.policy = { ...body.policy, maxPerTransaction: '999999999999.999999', remainingDailyBudget: '999999999999.999999', requireHumanAbove: '999999999999.999998' };
      expect(json(await post(body))).toMatchObject({ decision: 'HUMAN_APPROVAL', reasons: ['above_human_threshold'] });
    });

    it('accepts application/json with a charset parameter', async () => {
      const res = await postRaw(JSON.stringify(validBody()), 'application/json; charset=utf-8');
      expect(res.statusCode).toBe(200);
    });

    it('evaluates the largest allowed recipient list (1000 addresses)', async () => {
      const body = validBody();
      body.policy.allowedRecipients = Array.from({ length: 1000 }, (_, i) => `0x${i.toString(16).padStart(40, '0')}`);
      body.recipient = `0x${(999).toString(16).padStart(40, '0').toUpperCase()}`;
      expect(json(await post(body))).toMatchObject({ decision: 'APPROVE' });
    });

    it('stores nothing: no table gains a row, and the same request evaluates the same way again', async () => {
      // Rows of every table of this test's database (its own PostgreSQL schema, or its SQLite file).
      const rowCounts = async () => {
        // Listed from this schema's catalogue alone: introspecting every schema of the server
        // fails when a test file running beside this one drops its own meanwhile.
        const tables = t.database.pgSchema
          ? (await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = ${t.database.pgSchema}`.execute(t.database.db)).rows.map((r) => ({ ...r, schema: t.database.pgSchema }))
          : await t.database.db.introspection.getTables();
        expect(tables.map((table) => table.name)).toEqual(expect.arrayContaining(['decisions', 'policies', 'policy_day_spend']));
        const counts: Record<string, number> = {};
        for (const table of tables) {
          const { rows } = await sql<{ n: number | string }>`select count(*) as n from ${sql.table(`${table.schema ? `${table.schema}.` : ''}${table.name}`)}`.execute(t.database.db);
          counts[table.name] = Number(rows[0]!.n);
        }
        return counts;
      };
      const before = await rowCounts();
      // maxRepeats 1 ("once per window"): were the evaluation counted anywhere, the next would BLOCK.
      const body = validBody();
      body.policy.maxRepeats = 1;
      const first = json(await post(body));
      expect(first.decision).toBe('APPROVE');
      for (let i = 0; i < 3; i++) expect(json(await post(body))).toEqual(first);
      expect(await rowCounts()).toEqual(before);
    });
  });

  describe('field rules: each violation is a 400 problem naming the field', () => {
    type Case = [name: string, mutate: (b: Record<string, any>) => void, path: string];
    const set = (path: string, value: unknown) => (b: Record<string, any>) => {
      const keys = path.split('.');
      let o = b;
      for (const k of keys.slice(0, -1)) o = o[k];
      o[keys.at(-1)!] = value;
    };
    const del = (path: string) => (b: Record<string, any>) => {
      const keys = path.split('.');
      let o = b;
      for (const k of keys.slice(0, -1)) o = o[k];
      delete o[keys.at(-1)!];
    };
    const hex40 = 'a'.repeat(40);

    const cases: Case[] = [
      // additionalProperties false at every level
      ['extra top-level property', set('extra', 1), 'body/extra'],
      ['extra property in policy', set('policy.dailyBudget', '10'), 'body/policy/dailyBudget'],
      ['extra property in context', set('context.note', 'x'), 'body/context/note'],
      ['__proto__-like key as extra property', set('constructorx', {}), 'body/constructorx'],
      // address pattern
      ['recipient too short', set('recipient', '0x' + 'a'.repeat(39)), 'body/recipient'],
      ['recipient too long', set('recipient', '0x' + 'a'.repeat(41)), 'body/recipient'],
      ['recipient without 0x', set('recipient', 'a'.repeat(42)), 'body/recipient'],
      ['recipient with 0X', set('recipient', '0X' + hex40), 'body/recipient'],
      ['recipient with a non-hex digit', set('recipient', '0x' + 'g' + 'a'.repeat(39)), 'body/recipient'],
      ['recipient with a trailing space', set('recipient', `${ADDR.alice} `), 'body/recipient'],
      ['recipient with a trailing newline', set('recipient', `${ADDR.alice}\n`), 'body/recipient'],
      ['recipient with full-width digits', set('recipient', '0x' + '\uff11'.repeat(40)), 'body/recipient'],
      ['recipient as a number', set('recipient', 12345), 'body/recipient'],
      // A mistyped character in a checksummed address: its EIP-55 checksum no longer holds.
      ['recipient with a broken EIP-55 checksum', set('recipient', ADDR.mixedCase.replace('abCD', 'abCd')), 'body/recipient'],
      ['allowedRecipients with a broken EIP-55 checksum', set('policy.allowedRecipients', [ADDR.alice, ADDR.mixedCase.replace('DEF01', 'DEf01')]), 'body/policy/allowedRecipients/1'],
      ['allowedRecipients with a bad address', set('policy.allowedRecipients', [ADDR.alice, '0x1234']), 'body/policy/allowedRecipients/1'],
      ['allowedRecipients with a non-string', set('policy.allowedRecipients', [42]), 'body/policy/allowedRecipients/0'],
      ['allowedRecipients not an array', set('policy.allowedRecipients', ADDR.alice), 'body/policy/allowedRecipients'],
      ['allowedRecipients over 1000 entries', set('policy.allowedRecipients', Array.from({ length: 1001 }, () => ADDR.alice)), 'body/policy/allowedRecipients'],
      // amount pattern
      ['amount with 7 fractional digits', set('amount', '1.1234567'), 'body/amount'],
      ['amount with an exponent', set('amount', '1e3'), 'body/amount'],
      ['negative amount', set('amount', '-1'), 'body/amount'],
      ['amount with a plus sign', set('amount', '+1'), 'body/amount'],
      ['amount with a leading space', set('amount', ' 1'), 'body/amount'],
      ['amount with a trailing space', set('amount', '1 '), 'body/amount'],
      ['amount with a comma', set('amount', '1,5'), 'body/amount'],
      ['amount as a number', set('amount', 1), 'body/amount'],
      ['amount as a fractional number', set('amount', 1.5), 'body/amount'],
      ['empty amount', set('amount', ''), 'body/amount'],
      ['amount with a bare fraction', set('amount', '.5'), 'body/amount'],
      ['amount with a trailing dot', set('amount', '1.'), 'body/amount'],
      ['amount with 13 integer digits', set('amount', '1000000000000'), 'body/amount'],
      ['amount in Arabic-Indic digits', set('amount', '\u0661\u0662'), 'body/amount'],
      ['amount in full-width digits', set('amount', '\uff11\uff12'), 'body/amount'],
      ['amount as null', set('amount', null), 'body/amount'],
      ['amount as an object', set('amount', { $gt: '' }), 'body/amount'],
      ['maxPerTransaction with an exponent', set('policy.maxPerTransaction', '1e3'), 'body/policy/maxPerTransaction'],
      ['maxPerTransaction with 7 fractional digits', set('policy.maxPerTransaction', '0.0000001'), 'body/policy/maxPerTransaction'],
      ['remainingDailyBudget negative', set('policy.remainingDailyBudget', '-1'), 'body/policy/remainingDailyBudget'],
      ['requireHumanAbove as a number', set('policy.requireHumanAbove', 50), 'body/policy/requireHumanAbove'],
      // chain and asset
      ['chain ethereum', set('chain', 'ethereum'), 'body/chain'],
      ['chain Base (case)', set('chain', 'Base'), 'body/chain'],
      ['chain as chain id', set('chain', 8453), 'body/chain'],
      ['asset usdc (case)', set('asset', 'usdc'), 'body/asset'],
      ['asset USDT', set('asset', 'USDT'), 'body/asset'],
      // integers
      ['maxRepeats 0', set('policy.maxRepeats', 0), 'body/policy/maxRepeats'],
      ['maxRepeats 1.5', set('policy.maxRepeats', 1.5), 'body/policy/maxRepeats'],
      ['maxRepeats "3"', set('policy.maxRepeats', '3'), 'body/policy/maxRepeats'],
      ['maxRepeats -1', set('policy.maxRepeats', -1), 'body/policy/maxRepeats'],
      ['maxRepeats true', set('policy.maxRepeats', true), 'body/policy/maxRepeats'],
      ['maxRepeats null', set('policy.maxRepeats', null), 'body/policy/maxRepeats'],
      ['repeatCount -1', set('context.repeatCount', -1), 'body/context/repeatCount'],
      ['repeatCount 0.5', set('context.repeatCount', 0.5), 'body/context/repeatCount'],
      ['repeatCount "0"', set('context.repeatCount', '0'), 'body/context/repeatCount'],
      // enums and booleans
      ['proofDecision not in the enum', set('context.proofDecision', 'MAYBE'), 'body/context/proofDecision'],
      ['proofDecision lower case', set('context.proofDecision', 'allow'), 'body/context/proofDecision'],
      ['proofDecision VERIFIED', set('context.proofDecision', 'VERIFIED'), 'body/context/proofDecision'],
      ['blockUnknownRecipients "true"', set('policy.blockUnknownRecipients', 'true'), 'body/policy/blockUnknownRecipients'],
      ['blockUnknownRecipients 1', set('policy.blockUnknownRecipients', 1), 'body/policy/blockUnknownRecipients'],
      // objects
      ['policy null', set('policy', null), 'body/policy'],
      ['policy an array', set('policy', []), 'body/policy'],
      ['policy a string', set('policy', 'strict'), 'body/policy'],
      ['context null', set('context', null), 'body/context'],
      ['context an array', set('context', [1]), 'body/context'],
      // identifiers
      ['empty agentId', set('agentId', ''), 'body/agentId'],
      ['agentId over 80 characters', set('agentId', 'a'.repeat(81)), 'body/agentId'],
      ['agentId a number', set('agentId', 7), 'body/agentId'],
      ['empty requestId', set('requestId', ''), 'body/requestId'],
      ['requestId over 120 characters', set('requestId', 'r'.repeat(121)), 'body/requestId'],
      ['requestId huge', set('requestId', 'r'.repeat(60_000)), 'body/requestId'],
      // missing required fields
      ...(['agentId', 'requestId', 'chain', 'asset', 'recipient', 'amount', 'policy'] as const).map(
        (f): Case => [`missing ${f}`, del(f), `body/${f}`],
      ),
      ...(['maxPerTransaction', 'remainingDailyBudget', 'requireHumanAbove', 'maxRepeats', 'allowedRecipients', 'blockUnknownRecipients'] as const).map(
        (f): Case => [`missing policy.${f}`, del(`policy.${f}`), `body/policy/${f}`],
      ),
    ];

    it.each(cases)('%s', async (_name, mutate, path) => {
      const body = validBody();
      mutate(body);
      expectInvalid(await post(body), path);
    });

    it('a broken EIP-55 checksum is named as such, not read as another address', async () => {
      const body = validBody();
      body.recipient = ADDR.mixedCase.replace('abCD', 'abCd');
      const res = await post(body);
      expect(res.statusCode).toBe(400);
      expect(json(res).detail).toMatch(/^body\/recipient: has an EIP-55 checksum that does not match/);
      body.recipient = ADDR.mixedCase;
      expect((await post(body)).statusCode).toBe(200);
    });

    it('the boundaries just inside the rules are accepted', async () => {
      const body = validBody();
      body.agentId = 'a'.repeat(80);
      body.requestId = 'r'.repeat(120);
      body.amount = '1.123456';
      body.policy.maxRepeats = 1;
      body.context = { repeatCount: 0, proofDecision: 'UNKNOWN' };
      const res = await post(body);
      expect(res.statusCode, res.body).toBe(200);
    });

    it('lists every violation, not only the first', async () => {
      const body = validBody();
      body.amount = '1e3';
      body.chain = 'ethereum';
      body.policy.maxRepeats = 0;
      const problem = expectInvalid(await post(body));
      const paths = problem.errors.map((e: { path: string }) => e.path);
      expect(paths).toEqual(expect.arrayContaining(['body/amount', 'body/chain', 'body/policy/maxRepeats']));
    });

    it('an empty object names every missing field', async () => {
      const problem = expectInvalid(await post({}));
      const paths = problem.errors.map((e: { path: string }) => e.path);
      expect(paths).toEqual(expect.arrayContaining(['body/agentId', 'body/requestId', 'body/chain', 'body/asset', 'body/recipient', 'body/amount', 'body/policy']));
    });

    it('the problem body has exactly the documented members', async () => {
      const body = validBody();
      body.amount = '-1';
      const res = await post(body);
      const problem = expectInvalid(res, 'body/amount');
      expect(Object.keys(problem).sort()).toEqual(['code', 'detail', 'errors', 'requestId', 'status', 'title', 'type']);
      expect(problem.status).toBe(400);
      expect(problem.detail).toContain('body/amount');
    });

    it('every request gets its own request id', async () => {
      const body = validBody();
      body.amount = '-1';
      const a = expectInvalid(await post(body));
      const b = expectInvalid(await post(body));
      expect(a.requestId).not.toBe(b.requestId);
    });
  });

  describe('malformed and unexpected bodies', () => {
    it.each([
      ['truncated JSON', '{"agentId":'],
      ['unquoted keys', '{agentId: "a"}'],
      ['single quotes', "{'agentId':'a'}"],
      ['trailing garbage', `${JSON.stringify(validBody())}}`],
      ['trailing comma', '{"agentId":"a",}'],
      ['NaN literal', '{"amount": NaN}'],
      ['comment', '{/* hi */}'],
      ['bare word', 'undefined'],
      ['two documents', '{} {}'],
      ['unterminated string', '{"agentId":"a'],
      ['invalid escape', '{"agentId":"\\x41"}'],
      ['raw control character in a string', '{"agentId":"a\u0001b"}'],
    ])('%s is a 400 malformed_json', async (_name, payload) => {
      expectProblem(await postRaw(payload, 'application/json'), 400, 'malformed_json');
    });

    // Decoded with replacement characters, these bytes would be a valid body whose agentId is
    // "agent-\ufffd": different bytes, one string.
    it.each([
      ['0xff', [0xff]],
      ['a lone continuation byte', [0x80]],
      ['an overlong encoding of "/"', [0xc0, 0xaf]],
      ['a UTF-16 surrogate encoded as UTF-8 (CESU-8)', [0xed, 0xa0, 0x80]],
      ['a truncated sequence', [0xe2, 0x82]],
    ])('a body with invalid UTF-8 (%s) is a 400 malformed_json', async (_what, bytes) => {
      const [before, after] = JSON.stringify({ ...validBody(), agentId: 'agent-#' }).split('#');
      const problem = expectProblem(await postRaw(Buffer.concat([Buffer.from(before!), Buffer.from(bytes), Buffer.from(after!)]), 'application/json'), 400, 'malformed_json');
      expect(problem.detail).toMatch(/UTF-8/);
    });

    // JSON.parse reads these as whole numbers without a trace: 0.99999999999999999 repeats would
    // be 1 and BLOCK the spend, 1e2 would pass as 100.
    it.each([
      ['context.repeatCount', '0.99999999999999999'],
      ['context.repeatCount', '0.0'],
      ['policy.maxRepeats', '1e2'],
      ['policy.maxRepeats', '3.0'],
    ])('%s written as %s is a 400 naming the number', async (field, spelling) => {
      const body = validBody();
      const [outer, inner] = field.split('.') as [string, string];
      body[outer] = { ...body[outer], [inner]: 424242 };
      const text = JSON.stringify(body).replace('424242', spelling);
      const problem = expectProblem(await postRaw(text, 'application/json'), 400, 'invalid_request');
      expect(problem.detail).toContain(spelling);
    });

    it('a body in valid UTF-8 beyond ASCII is read as written', async () => {
      const res = await postRaw(Buffer.from(JSON.stringify({ ...validBody(), agentId: 'agent-é-\u{1f600}' }), 'utf8'), 'application/json; charset=UTF-8');
      expect(res.statusCode, res.body).toBe(200);
    });

    it.each(['utf8', 'UTF8', '"utf-8"'])('a body labelled charset=%s is read as UTF-8', async (charset) => {
      const res = await postRaw(JSON.stringify(validBody()), `application/json; charset=${charset}`);
      expect(res.statusCode, res.body).toBe(200);
    });

    it.each(['iso-8859-1', 'utf-16', 'latin1', '"windows-1252"', 'utf-8; charset=utf-16', 'latin1; charset=utf-8'])('a body labelled charset=%s is a 415', async (charset) => {
      expectProblem(await postRaw(JSON.stringify(validBody()), `application/json; charset=${charset}`), 415, 'unsupported_media_type');
    });

    it.each(['gzip', 'deflate', 'br'])('a body with Content-Encoding: %s is a 415, whatever its bytes', async (coding) => {
      const res = await inject({ method: 'POST', url: URL, payload: JSON.stringify(validBody()), headers: { 'content-type': 'application/json', 'content-encoding': coding } });
      expectProblem(res, 415, 'unsupported_media_type');
    });

    it('Content-Encoding: identity is a plain body', async () => {
      const res = await inject({ method: 'POST', url: URL, payload: JSON.stringify(validBody()), headers: { 'content-type': 'application/json', 'content-encoding': 'identity' } });
      expect(res.statusCode, res.body).toBe(200);
    });

    it('an empty body with content-type application/json is a 400: the body is required', async () => {
      expectProblem(await postRaw('', 'application/json'), 400, 'invalid_request');
    });

    it('whitespace only is a 400 malformed_json', async () => {
      expectProblem(await postRaw('   \n', 'application/json'), 400, 'malformed_json');
    });

    it.each([
      ['an array', '[]'],
      ['an array of the valid body', JSON.stringify([validBody()])],
      ['a string', '"hello"'],
      ['null', 'null'],
      ['a number', '42'],
      ['true', 'true'],
    ])('a JSON body that is %s is a 400 invalid_request', async (_name, payload) => {
      expectInvalid(await postRaw(payload, 'application/json'), 'body');
    });

    it('no body at all is a 400 invalid_request', async () => {
      expectInvalid(await inject({ method: 'POST', url: URL }), 'body');
    });

    it('prototype-pollution keys are refused with a 400', async () => {
      for (const payload of [
        `{"__proto__":{"polluted":true},${JSON.stringify(validBody()).slice(1)}`,
        `{"constructor":{"prototype":{"polluted":true}},${JSON.stringify(validBody()).slice(1)}`,
      ]) {
        const res = await postRaw(payload, 'application/json');
        expect(res.statusCode).toBe(400);
        expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      }
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    });

    it.each([
      ['text/plain', 'text/plain'],
      ['text/plain with charset', 'text/plain; charset=utf-8'],
      ['form-urlencoded', 'application/x-www-form-urlencoded'],
      ['multipart', 'multipart/form-data; boundary=x'],
      ['xml', 'application/xml'],
      ['octet-stream', 'application/octet-stream'],
    ])('a %s body is a 415', async (_name, contentType) => {
      expectProblem(await postRaw(JSON.stringify(validBody()), contentType), 415, 'unsupported_media_type');
    });

    it('a body without a content type is a 415', async () => {
      expectProblem(await postRaw(JSON.stringify(validBody())), 415, 'unsupported_media_type');
    });

    it('a body over 64 KiB is a 413; exactly 64 KiB is read', async () => {
      const sized = (bytes: number) => {
        const body = validBody();
        body.agentId = '';
        const base = Buffer.byteLength(JSON.stringify(body));
        body.agentId = 'x'.repeat(bytes - base);
        const text = JSON.stringify(body);
        expect(Buffer.byteLength(text)).toBe(bytes);
        return text;
      };
      expectProblem(await postRaw(sized(64 * 1024 + 1), 'application/json'), 413, 'payload_too_large');
      expectProblem(await postRaw('x'.repeat(1024 * 1024), 'application/json'), 413, 'payload_too_large');
      // 64 KiB itself is within the limit: read, then refused for the over-long agentId.
      expectInvalid(await postRaw(sized(64 * 1024), 'application/json'), 'body/agentId');
    });

    it('deep nesting within the size limit is a 4xx, never a crash', async () => {
      // Built as text: JSON.stringify itself would overflow the stack on these.
      const arrays = (n: number) => '['.repeat(n) + ']'.repeat(n);
      const objects = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);
      const valid = JSON.stringify(validBody());
      const withField = (field: string, raw: string) => valid.replace(new RegExp(`"${field}":("[^"]*"|\\{[^}]*\\}|\\[[^\\]]*\\])`), `"${field}":${raw}`);
      const cases: Array<[string, string, string | undefined]> = [
        ['nested arrays as the body', arrays(30_000), 'body'],
        ['nested objects as the body', objects(10_000), undefined],
        ['nested arrays as agentId', withField('agentId', arrays(20_000)), 'body/agentId'],
        ['nested objects as context', withField('context', objects(5000)), undefined],
        ['nested arrays as allowedRecipients', withField('allowedRecipients', arrays(20_000)), 'body/policy/allowedRecipients/0'],
      ];
      for (const [name, payload, path] of cases) {
        expect(payload.length, name).toBeLessThan(64 * 1024);
        expect(payload, name).not.toBe(valid);
        const res = await postRaw(payload, 'application/json');
        expect(res.statusCode, `${name}: ${res.body.slice(0, 200)}`).toBe(400);
        if (path) expectInvalid(res, path);
        else expectProblem(res, 400, 'invalid_request');
      }
    });

    it('huge numbers and odd unicode are a 4xx or an answer, never a 5xx', async () => {
      const big = `{"maxRepeats": 1e400}`;
      expect((await postRaw(`${JSON.stringify(validBody()).slice(0, -1)},"x":${big}}`, 'application/json')).statusCode).toBe(400);
      const huge = JSON.stringify(validBody()).replace('"maxRepeats":3', '"maxRepeats":1e400');
      expectInvalid(await postRaw(huge, 'application/json'), 'body/policy/maxRepeats');
      const longInt = JSON.stringify(validBody()).replace('"maxRepeats":3', `"maxRepeats":${'9'.repeat(400)}`);
      expectInvalid(await postRaw(longInt, 'application/json'), 'body/policy/maxRepeats');

      const body = validBody();
      body.agentId = 'agent-\u{1F916}-é-支払い';
      const res = await post(body);
      expect(res.statusCode).toBe(200);
      expect(json(res).decision).toBe('APPROVE');
      // The ids a protected decision would store must be storable: no NUL, no lone surrogate.
      for (const agentId of ['agent-\u0000', 'agent-\ud800', '\udfff']) {
        expectInvalid(await post({ ...validBody(), agentId }), 'body/agentId');
      }
    });
  });

  describe('routes', () => {
    it('an unknown route is a 404 problem', async () => {
      for (const [method, url] of [
        ['GET', '/api/nope'],
        ['POST', '/api/nope'],
        ['GET', '/api/spendpolicy/evaluatex'],
        ['GET', '/api/spendpolicy/policies/sgp_00000000000000000000000000000000/nope'],
        ['GET', '/'],
        ['GET', '/%2e%2e/etc/passwd'],
        ['GET', '/api/nope?key=secret-value'],
      ] as const) {
        const problem = expectProblem(await inject({ method, url }), 404, 'route_not_found');
        // query strings can carry secrets; the problem body does not echo them
        expect(problem.detail).not.toContain('secret-value');
      }
    });

    it('a path that exists, asked with another method, is 405 with the methods it answers in Allow', async () => {
      const policy = `/api/spendpolicy/policies/sgp_${'0'.repeat(32)}`;
      for (const [method, url, allow] of [
        ['GET', URL, 'POST, OPTIONS'],
        ['DELETE', `${URL}/`, 'POST, OPTIONS'],
        ['PATCH', policy, 'GET, HEAD, PUT, OPTIONS'],
        ['DELETE', `${policy}?key=secret-value`, 'GET, HEAD, PUT, OPTIONS'],
        ['POST', '/healthz', 'GET, HEAD, OPTIONS'],
      ] as const) {
        const res = await inject({ method, url });
        const problem = expectProblem(res, 405, 'method_not_allowed');
        expect(res.headers.allow).toBe(allow);
        expect(problem.detail).toContain(allow);
        expect(problem.detail).not.toContain('secret-value');
      }
      // Its body is not read: the method is what is wrong.
      const res = await inject({ method: 'PUT', url: URL, payload: '{not json', headers: { 'content-type': 'application/json' } });
      expectProblem(res, 405, 'method_not_allowed');
    });

    it('a malformed percent-encoding or an over-long path parameter is a 400 problem, not a framework body', async () => {
      for (const url of [
        '/api/evidence-chains/ec_%G0',
        '/api/spendpolicy/policies/%ED%A0%80',
        '/nope/%E0%A4%A',
        `/api/spendpolicy/policies/sgp_${'0'.repeat(5000)}`,
      ]) {
        const problem = expectProblem(await inject({ method: 'GET', url }), 400, 'invalid_request');
        expect(problem.detail).not.toContain('%');
      }
    });

    it('a body that names a member twice is 400 malformed_json, whichever value comes last', async () => {
      const body = JSON.stringify(validBody());
      for (const payload of [body.replace('"amount":', '"amount":"0.01","amount":'), body.replace('"policy":{', '"policy":{"maxRepeats":9,')]) {
        const problem = expectProblem(await inject({ method: 'POST', url: URL, payload, headers: { 'content-type': 'application/json' } }), 400, 'malformed_json');
        expect(problem.detail).toMatch(/twice/);
      }
    });

    it('a 404 on an unknown route does not read the body', async () => {
      const res = await inject({ method: 'POST', url: '/api/nope', payload: '{not json', headers: { 'content-type': 'application/json' } });
      expectProblem(res, 404, 'route_not_found');
    });

    it('a trailing slash reaches the same route', async () => {
      const res = await inject({ method: 'POST', url: `${URL}/`, payload: validBody() });
      expect(res.statusCode).toBe(200);
    });

    it('a query string is ignored', async () => {
      const res = await inject({ method: 'POST', url: `${URL}?debug=1`, payload: validBody() });
      expect(res.statusCode).toBe(200);
    });
  });
});
