/**
 * OpenAPI-driven, property-based conformance test (in the spirit of Schemathesis).
 *
 * HOW TO RUN
 *   npx vitest run --project sqlite tests/api/openapi-fuzz.test.ts             (CI size, fixed seed)
 *   TEST_DATABASE_URL=postgres://… npx vitest run --project postgres tests/api/openapi-fuzz.test.ts
 * Longer or other runs, through environment variables:
 *   FUZZ_RUNS=2000      generated requests per operation (default 60; a third as many after 31 days)
 *   FUZZ_SEED=$RANDOM   fast-check seed (default 20260115); a failure names the seed it ran with
 *   FUZZ_VERBOSE=1      per operation: statuses seen, time taken, slowest request
 *
 * WHAT IT DOES
 * The app's own /openapi.json is read and, for every operation in it, fast-check builds requests
 * from the documented request schemas (path and query parameters, headers, JSON body): requests
 * valid per the document, and requests with one part (sometimes two) mutated: wrong types,
 * missing required members, unknown members (keys as member names too), boundary and oversized
 * strings, amounts with 7 fractional digits, leading zeros, exponents, signs, non-ASCII digits,
 * unicode (astral, combining, bidi, NUL, lone surrogates), numbers beyond 2^53, nulls, arrays for
 * objects, empty, malformed and oversized bodies, duplicate members, other content types and
 * encodings, malformed path and query parameters, If-Match, x402 and recovery headers, and
 * missing / wrong-kind / other-policy / unknown / malformed / doubled Authorization headers.
 * Fixtures are made through the API: three protected policies (admin and agent keys), decisions,
 * evidence chains (one policy with direct checks on), a recovery order; so that authenticated
 * operations get past authentication in most of the valid cases. No chain RPC or market data is
 * reachable (502 / 503 / UNKNOWN as documented); a stand-in facilitator on loopback lets the paid
 * reports build their 402 challenge and refuses every payment (nothing is ever paid). Rate limits
 * are on, and some requests come from one shared source so that 429s are met. A last test moves
 * the clock 31 days on (pilot access and recovery periods over) and fuzzes again.
 *
 * WHAT IT CHECKS, for every response
 *  - the status is one the document lists for the operation; never a 5xx, except what this
 *    configuration makes documented (502 upstream_unavailable for the market tools; 503
 *    direct_checks_disabled / provider_unavailable for the direct evidence checks);
 *  - every header the document marks required is there (x-request-id, PAYMENT-REQUIRED on 402);
 *  - every error is application/problem+json with the body of DESIGN.md section 3 (type, title,
 *    status, code from the closed set with its status, detail, requestId = x-request-id) and
 *    matches the documented problem schema; 401 titles exactly as specified, and (RFC 9110) a
 *    WWW-Authenticate challenge; 429 and 202 carry Retry-After;
 *  - every 2xx body validates (ajv, JSON Schema 2020-12 with formats, as strict as the document);
 *  - a request the document says is invalid is refused (400, or 413 / 415), a valid one is not;
 *  - the key rules of the specification: 401 for no key or one of the wrong kind, 404 for a key of
 *    another policy or an unknown one, 400 for two Authorization headers, 410 once access ended;
 *  - no response body or header carries a key the caller holds: keys are shown once, and only
 *    policy creation, key rotations and order creation answer one (a fresh one);
 *  - what the specification and DESIGN.md say of content: executionAuthorized and
 *    automaticPayment always false; the free evaluation follows the rules table of DESIGN.md;
 *    created and replaced policies are the request in canonical form with the right revision;
 *    the 402 challenge is x402 v2 for the report's price on eip155:8453; and a few more.
 * Violations are collected per operation (one smallest example per kind of violation, with the
 * request, what was mutated and the response) and that operation's test fails listing them.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import fc from 'fast-check';
import { getAddress, isAddress } from 'viem';
import { describe, expect, it } from 'vitest';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { ERROR_CODES } from '../../src/platform/errors.js';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { AGENT, bearer, createPolicy, decide, START, type Created } from '../helpers/policies.js';
import { standInFacilitator } from '../helpers/stand-in-facilitator.js';
import { suiteFixture } from '../helpers/suite.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 60);
const SEED = Number(process.env.FUZZ_SEED ?? 20260115);
const VERBOSE = process.env.FUZZ_VERBOSE === '1';
const BODY_LIMIT = 64 * 1024;
const USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';
const PAY_TO = '0x5555555555555555555555555555555555555555';
const TEXT_PATTERN = '^[^\\u0000\\ud800-\\udfff]*$';
const SHARED_SOURCE = '203.0.113.7';

/** Every operation this build documents; the test below checks that the document lists exactly these. */
const OPERATIONS = [
  'GET /healthz',
  'GET /readyz',
  'GET /api/services',
  'GET /openapi.json',
  'GET /terms',
  'GET /privacy',
  'GET /.well-known/jwks.json',
  'POST /api/spendpolicy/evaluate',
  'POST /api/pilot-leads',
  'POST /api/spendpolicy/policies',
  'GET /api/spendpolicy/policies/{policyId}',
  'PUT /api/spendpolicy/policies/{policyId}',
  'GET /api/spendpolicy/policies/{policyId}/decisions',
  'POST /api/spendpolicy/policies/{policyId}/agent-key',
  'POST /api/spendpolicy/policies/{policyId}/admin-key',
  'POST /api/spendpolicy/decisions',
  'GET /api/spendpolicy/decisions/{decisionId}',
  'POST /api/spendpolicy/decisions/{decisionId}/approve',
  'POST /api/token-risk',
  'POST /api/transaction-preflight',
  'GET /api/quick-check',
  'POST /api/verify-payment',
  'POST /api/orders',
  'POST /api/orders/recover',
  'POST /api/evidence-chains',
  'GET /api/evidence-chains/{evidenceChainId}',
  'GET /api/evidence-chains/{evidenceChainId}/summary',
  'POST /api/evidence-chains/{evidenceChainId}/preflight',
  'POST /api/evidence-chains/{evidenceChainId}/settlement',
  'POST /api/token-preview',
  'POST /api/token-coverage',
] as const;

// ---------------------------------------------------------------------------------------------
// The world: one app (no chain RPC or market data reachable; PAY_TO set and a stand-in
// facilitator, so that paid reports answer their 402) and fixtures made through the API.

type KeyName = 'adminA' | 'agentA' | 'adminB' | 'agentB' | 'adminC' | 'agentC';
type Owner = 'A' | 'B' | 'C';

interface World {
  t: TestApp;
  doc: any;
  /** Placeholder values: `@@name@@` in a generated request is replaced at send time. */
  refs: Record<string, string>;
  /** Which policy each referenced resource belongs to. */
  owners: Record<string, Owner>;
  /** Every secret the caller holds (keys of all kinds); none may come back but where it is issued. */
  secrets: Set<string>;
  /** expired: the clock has passed the fixtures' pilot access and recovery periods. */
  flags: { expired: boolean };
  close(): Promise<void>;
}

async function makeWorld(): Promise<World> {
  const facilitator = await standInFacilitator();
  // Rate limits on: most requests come from a source of their own, some from one shared source
  // that runs into the per-source limits (lowered for leads, policies and orders), so that 429s
  // are met too.
  const t = await createTestApp({ config: { payTo: PAY_TO, facilitatorUrl: facilitator.url, rateLimits: true, leadLimit: 5, policyCreateLimit: 10, orderLimit: 10 } });
  t.clock.set(START);
  const refs: Record<string, string> = {};
  const owners: Record<string, Owner> = {};
  const secrets = new Set<string>();
  const policies: Record<Owner, Created> = {} as Record<Owner, Created>;
  for (const p of ['A', 'B', 'C'] as const) {
    const created = await createPolicy(t, { blockUnknownRecipients: p !== 'A' });
    policies[p] = created;
    refs[`policy${p}`] = created.policyId;
    refs[`admin${p}`] = created.adminKey;
    refs[`agent${p}`] = created.agentKey;
    owners[`policy${p}`] = p;
    secrets.add(created.adminKey).add(created.agentKey);
  }
  refs.revB = '1';
  // C takes direct evidence checks (the operator's act); its checks then meet the dead RPC.
  expect(await new PolicyStore(t.database).setDirectChecks(policies.C.policyId, true, t.clock.now())).toBe(true);

  const a = policies.A;
  const human = [];
  for (let i = 0; i < 4; i++) human.push((await decide(t, a, { amount: '30', requestId: `fixture-human-${i}` })).decision);
  const approved = (await decide(t, a, { amount: '1', requestId: 'fixture-approve' })).decision;
  const blocked = (await decide(t, a, { amount: '60', requestId: 'fixture-block' })).decision;
  for (const d of human) expect(d.decision).toBe('HUMAN_APPROVAL');
  expect(approved.decision).toBe('APPROVE');
  expect(blocked.decision).toBe('BLOCK');
  human.forEach((d, i) => ((refs[`decHuman${i}`] = d.decisionId), (owners[`decHuman${i}`] = 'A')));
  refs.decApprove = approved.decisionId;
  refs.decBlock = blocked.decisionId;
  owners.decApprove = owners.decBlock = 'A';

  for (const p of ['A', 'C'] as const) {
    const res = await t.app.inject({
      method: 'POST',
      url: '/api/evidence-chains',
      headers: bearer(policies[p].agentKey),
      payload: { policyId: policies[p].policyId, agentId: AGENT, requestId: `fixture-chain-${p}`, chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount: '2' },
    });
    expect(res.statusCode, res.body).toBe(201);
    refs[`chain${p}`] = json(res).evidenceChainId;
    owners[`chain${p}`] = p;
  }
  const order = await t.app.inject({ method: 'POST', url: '/api/orders', payload: { path: '/api/quick-check', input: {} } });
  expect(order.statusCode, order.body).toBe(201);
  refs.orderId = json(order).id;
  refs.orderKey = json(order).key;
  secrets.add(refs.orderKey!);

  const res = await t.app.inject({ method: 'GET', url: '/openapi.json' });
  expect(res.statusCode).toBe(200);
  registerComponents(json(res));
  return {
    t,
    doc: json(res),
    refs,
    owners,
    secrets,
    flags: { expired: false },
    async close() {
      await t.close();
      await facilitator.close();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Requests

/** A number written exactly as given in the JSON text (1e2, 1.0, 9007199254740993). */
class RawNumber {
  constructor(readonly text: string) {}
}

type AuthChoice =
  | { kind: 'none' }
  /** The key the operation takes, of the policy the request's resource belongs to. */
  | { kind: 'right'; pick: number }
  | { kind: 'key'; name: KeyName }
  /** A header value; `expect` is what the specification makes of it when the rest is valid. */
  | { kind: 'raw'; value: string; expect: 'missing' | 'unknown' | 'either'; keyKind?: 'admin' | 'agent' }
  | { kind: 'double'; names: [KeyName, KeyName] };

type Body =
  | { kind: 'none' }
  | { kind: 'json'; value: unknown }
  /** Text or bytes sent as they are; `verdict` says what the contract makes of them. */
  | { kind: 'raw'; data: string | Buffer; verdict: 'malformed' | 'valid-if-parsed' | 'either' };

interface Req {
  labels: string[];
  params: Record<string, { value: string; encoded?: boolean }>;
  query: Array<[string, string]>;
  /** Query parameters the document does not list (the route may ignore or refuse them). */
  unknownQuery?: boolean;
  headers: Record<string, string>;
  auth: AuthChoice;
  body: Body;
  /** null: no Content-Type header. */
  contentType: string | null;
  /** What the Content-Type and Content-Encoding make of a body: accepted JSON, or 415. */
  mediaOk: boolean;
  /** Header combinations the document's schemas cannot express but the text documents (invalid). */
  headerInvalid?: string;
  /** Recovery credentials that name no order or the wrong key (404 is as right as a 400 then). */
  wrongOrder?: boolean;
  /** A PAYMENT-SIGNATURE that is no x402 v2 payment: refused as payments are (402 payment_invalid), not as input. */
  badPayment?: boolean;
  /** If-Match with a well-formed entity-tag that is no revision (valid; 412 when it does not match). */
  ifMatchOther?: boolean;
  /** The client address the request comes from (per-source rate limits). */
  source: string;
}

interface Op {
  id: string;
  method: string;
  path: string;
  spec: any;
  params: any[];
  bodySchema: any | undefined;
  bodyRequired: boolean;
  security: string[];
}

const KEY_KINDS: Record<KeyName, 'admin' | 'agent'> = {
  adminA: 'admin',
  agentA: 'agent',
  adminB: 'admin',
  agentB: 'agent',
  adminC: 'admin',
  agentC: 'agent',
};
const ownerOfKey = (k: KeyName) => k.slice(-1) as Owner;

function operations(doc: any): Op[] {
  const ops: Op[] = [];
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    for (const method of ['get', 'put', 'post', 'delete', 'patch']) {
      const spec = item[method];
      if (!spec) continue;
      ops.push({
        id: `${method.toUpperCase()} ${path}`,
        method: method.toUpperCase(),
        path,
        spec,
        params: spec.parameters ?? [],
        bodySchema: spec.requestBody?.content?.['application/json']?.schema,
        bodyRequired: spec.requestBody?.required === true,
        security: (spec.security ?? []).flatMap((s: Record<string, unknown>) => Object.keys(s)),
      });
    }
  }
  return ops;
}

/** The key kinds an operation takes, from its security requirements. */
const acceptedKinds = (op: Op) => op.security.filter((s) => s === 'adminKey' || s === 'agentKey').map((s) => (s === 'adminKey' ? 'admin' : 'agent'));

// ---------------------------------------------------------------------------------------------
// Arbitraries from schemas

const ADDRESS_HINTS = [ADDR.alice, ADDR.bob, ADDR.carol, ADDR.mixedCase, USDC];
const AMOUNT_HINTS = ['1', '2', '10', '12.5', '20', '20.000001', '30', '50', '60', '0.000001', '0'];

/** Unicode text of `min`..`max` code points, mixing scripts, emoji, combining marks and bidi controls. */
function textArb(min: number, max: number): fc.Arbitrary<string> {
  const unit = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...'abcXYZ019 -_.:/@'.split('')) },
    { weight: 1, arbitrary: fc.constantFrom('é', 'ß', 'Ω', 'я', 'مر', '中', '𝔘', '👍🏽', '\u0301', '\u200b', '\u202e', '\t', '\n', '"', '\\', '\u007f', '\ufeff', '\uffff') },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
  );
  const short = fc.array(unit, { minLength: Math.max(min, 0), maxLength: Math.min(max, Math.max(min, 12)) }).map((u) => u.join(''));
  const exact = (n: number) => fc.constantFrom('a'.repeat(n), '𝔘'.repeat(n), 'é'.repeat(n));
  return fc
    .oneof({ weight: 8, arbitrary: short }, { weight: 1, arbitrary: exact(max) }, { weight: 1, arbitrary: exact(Math.max(min, 1)) })
    .filter((s) => codePoints(s) >= min && codePoints(s) <= max && new RegExp(TEXT_PATTERN, 'u').test(s));
}

const codePoints = (s: string) => [...s].length;

/** Values valid per `schema`; `hint(name)` mixes fixture values in for members of that name. */
function valid(schema: any, name: string, hint: (name: string, schema: any) => fc.Arbitrary<unknown> | undefined): fc.Arbitrary<unknown> {
  const h = hint(name, schema);
  const plain = validPlain(schema, name, hint);
  return h ? fc.oneof({ weight: 3, arbitrary: h }, { weight: 1, arbitrary: plain }) : plain;
}

function validPlain(schema: any, name: string, hint: (name: string, schema: any) => fc.Arbitrary<unknown> | undefined): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum);
  if (schema.anyOf || schema.oneOf) return fc.oneof(...(schema.anyOf ?? schema.oneOf).map((s: any) => valid(s, name, hint)));
  switch (schema.type) {
    case 'string': {
      const min = schema.minLength ?? 0;
      const max = schema.maxLength ?? 200;
      if (schema.format === 'email') return fc.emailAddress().filter((e) => e.length <= max);
      if (schema.format === 'date-time') return fc.date({ noInvalidDate: true }).map((d) => d.toISOString());
      if (schema.pattern === TEXT_PATTERN) return textArb(min, max);
      if (schema.format === ADDRESS_FORMAT) {
        // Lower case, upper case, and EIP-55 checksummed; mixed case with a broken checksum is not valid.
        const hex = fc.stringMatching(/^0x[0-9a-f]{40}$/);
        return fc.oneof(hex, hex.map((a) => `0x${a.slice(2).toUpperCase()}`), hex.map((a) => getAddress(a)));
      }
      if (schema.pattern) {
        const matching = fc.stringMatching(new RegExp(schema.pattern, 'u')).filter((s) => codePoints(s) >= min && codePoints(s) <= max);
        // Digit strings at their longest (a uint256 in 78 digits, a cursor in 18).
        const digits = /^\^\[0-9\]\{1,(\d+)\}\$$/.exec(schema.pattern);
        return digits ? fc.oneof({ weight: 4, arbitrary: matching }, { weight: 1, arbitrary: fc.constantFrom('9'.repeat(Number(digits[1])), `1${'0'.repeat(Number(digits[1]) - 1)}`, '0') }) : matching;
      }
      return fc.string({ minLength: min, maxLength: Math.min(max, 40) });
    }
    case 'integer':
      return fc.oneof(
        fc.integer({ min: schema.minimum ?? -1000, max: Math.min(schema.maximum ?? 1000, (schema.minimum ?? 0) + 20) }),
        fc.constantFrom(...[schema.minimum, schema.maximum].filter((x) => typeof x === 'number')),
      );
    case 'number':
      return fc.double({ noNaN: true, noDefaultInfinity: true });
    case 'boolean':
      return fc.boolean();
    case 'array':
      return fc.array(valid(schema.items ?? {}, name, hint), { minLength: schema.minItems ?? 0, maxLength: Math.min(schema.maxItems ?? 4, 4) });
    case 'object': {
      const props = schema.properties ?? {};
      const model: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [k, s] of Object.entries<any>(props)) model[k] = valid(s, k, hint);
      return fc.record(model, { requiredKeys: schema.required ?? [] });
    }
    default:
      return fc.constant({});
  }
}

// ---------------------------------------------------------------------------------------------
// Mutations of a JSON body

type Path = Array<string | number>;

interface Location {
  path: Path;
  schema: any;
  /** The schema of the object holding this member, when it is a member. */
  parent?: any;
}

/** Every place in `value` that `schema` describes (the root, members and array items). */
function locations(schema: any, value: unknown, path: Path = []): Location[] {
  const out: Location[] = [{ path, schema }];
  if (!schema || typeof value !== 'object' || value === null) return out;
  if (Array.isArray(value)) {
    value.forEach((v, i) => out.push(...locations(schema.items ?? {}, v, [...path, i])));
    return out;
  }
  for (const [k, v] of Object.entries(value)) {
    const s = schema.properties?.[k];
    if (!s) continue;
    const sub = locations(s, v, [...path, k]);
    sub[0] = { ...sub[0]!, parent: schema };
    out.push(...sub);
  }
  return out;
}

function setAt(root: unknown, path: Path, value: unknown | typeof DELETE): unknown {
  if (path.length === 0) return value;
  const copy: any = Array.isArray(root) ? [...(root as unknown[])] : { ...(root as object) };
  const [head, ...rest] = path;
  if (rest.length === 0) {
    if (value === DELETE) {
      if (Array.isArray(copy)) copy.splice(head as number, 1);
      else delete copy[head as string];
    } else copy[head as string] = value;
    return copy;
  }
  copy[head as string] = setAt(copy[head as string], rest, value);
  return copy;
}
const DELETE = Symbol('delete');

const AMOUNT_EDGES = [
  '1.1234567', '0.0000001', '1.123456', '999999999999.999999', '9999999999999', '1000000000000', '007', '00.5', '0.50', '00',
  '1e2', '1E2', '1.5e-3', '-1', '-0', '+1', '1.', '.5', ' 1', '1 ', '1,5', '1_000', '0x10', 'Infinity', 'NaN', '١', '１', '1\u00a0',
  '', '12.5\n', '9007199254740993', '18446744073709551616',
];
const STRING_EDGES = [
  '', ' ', '\t', '\u0000', 'a\u0000b', '\ud800', 'x\udc00y', 'e\u0301', '👍🏽', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'مرحبا', '\u202eevil', '\u200b', '\ufeff',
  'null', '<script>alert(1)</script>', "' OR 1=1 --", '%00', '../..', 'BASE', 'Base', 'base ', 'usdc', 'USDC ',
  '0x', `0X${'1'.repeat(40)}`, `0x${'1'.repeat(39)}`, `0x${'1'.repeat(41)}`, `0x${'g'.repeat(40)}`, `0x${'1'.repeat(40)}\n`, ` 0x${'1'.repeat(40)}`,
  `0x${'a'.repeat(64)}`, `0x${'a'.repeat(63)}`, 'sgp_' + '0'.repeat(32), 'SGP_' + '0'.repeat(32), 'ec_' + 'A'.repeat(32),
  'x'.repeat(5000),
];
const INTEGER_EDGES = ['0', '-1', '1', '1000000', '1000001', '200', '201', '9007199254740993', '-9007199254740993', '1e2', '1.0', '1E400', '-0', '0.5', '2.5e1', '1e-7'];

interface Mutated {
  value: unknown;
  label: string;
}

/** One mutation of a JSON body: the label says what was done. */
function mutateBody(schema: any, value: unknown): fc.Arbitrary<Mutated> {
  const locs = locations(schema, value);
  const members = locs.filter((l) => l.parent);
  const objects = locs.filter((l) => l.schema?.type === 'object');
  const strings = locs.filter((l) => l.schema?.type === 'string');
  const integers = locs.filter((l) => l.schema?.type === 'integer');
  const amounts = strings.filter((l) => /\[0-9\]\{[01],1[12]\}/.test(String(l.schema.pattern ?? '')));
  const arrays = locs.filter((l) => l.schema?.type === 'array');
  const requiredMembers = objects.flatMap((o) => ((o.schema.required ?? []) as string[]).map((k) => [...o.path, k]));
  const where = (p: Path) => (p.length ? p.join('.') : '(root)');
  const options: Array<fc.Arbitrary<Mutated>> = [];
  if (requiredMembers.length) options.push(fc.constantFrom(...requiredMembers).map((p) => ({ value: setAt(value, p, DELETE), label: `drop required ${where(p)}` })));
  if (objects.length) {
    options.push(
      fc.tuple(fc.constantFrom(...objects), fc.constantFrom('extra', 'Chain', 'executionAuthorized', 'constructor', 'toString', 'a'.repeat(300), '', ' ', 'é', '@@adminA@@', '@@agentA@@', '@@orderKey@@'), fc.jsonValue({ maxDepth: 1 })).map(([o, k, v]) => ({
        value: setAt(value, [...o.path, k], v),
        label: `unknown member ${where([...o.path, k])}`,
      })),
    );
  }
  if (members.length) {
    options.push(
      fc.tuple(fc.constantFrom(...members), fc.constantFrom<unknown>(null, 0, 1, -1, 1.5, true, false, '', 'x', [], [1], {}, { a: 1 }, new RawNumber('9007199254740993'))).map(([l, v]) => ({
        value: setAt(value, l.path, v),
        label: `${where(l.path)} := ${v instanceof RawNumber ? v.text : JSON.stringify(v)}`,
      })),
    );
  }
  if (strings.length) {
    options.push(
      fc.tuple(fc.constantFrom(...strings), fc.constantFrom(...STRING_EDGES)).map(([l, s]) => ({ value: setAt(value, l.path, s), label: `${where(l.path)} := edge string ${JSON.stringify(s.slice(0, 40))}${s.length > 40 ? `…(${s.length})` : ''}` })),
    );
    const bounded = strings.filter((l) => typeof l.schema.maxLength === 'number');
    if (bounded.length) {
      options.push(
        fc.tuple(fc.constantFrom(...bounded), fc.constantFrom(0, 1), fc.constantFrom('a', '𝔘', 'é', 'e\u0301')).map(([l, over, unit]) => {
          const s = unit.repeat(l.schema.maxLength + over);
          return { value: setAt(value, l.path, s), label: `${where(l.path)} := ${JSON.stringify(unit)} x ${l.schema.maxLength + over} (maxLength ${l.schema.maxLength})` };
        }),
      );
    }
    // Whitespace around, or another case of, an otherwise valid value.
    options.push(
      fc.tuple(fc.constantFrom(...strings), fc.constantFrom('pad', 'upper', 'lower')).map(([l, how]) => {
        const s = String(getAt(value, l.path) ?? '');
        const v = how === 'pad' ? ` ${s} ` : how === 'upper' ? s.toUpperCase() : s.toLowerCase();
        return { value: setAt(value, l.path, v), label: `${where(l.path)} := ${how} of valid value` };
      }),
    );
  }
  if (amounts.length) {
    options.push(
      fc.tuple(fc.constantFrom(...amounts), fc.constantFrom<unknown>(...AMOUNT_EDGES, new RawNumber('1.5'), new RawNumber('10'), new RawNumber('1e2'))).map(([l, a]) => ({
        value: setAt(value, l.path, a),
        label: `${where(l.path)} := amount ${a instanceof RawNumber ? `number ${a.text}` : JSON.stringify(a)}`,
      })),
    );
  }
  if (integers.length) {
    options.push(
      fc.tuple(fc.constantFrom(...integers), fc.constantFrom(...INTEGER_EDGES), fc.boolean()).map(([l, n, asString]) => ({
        value: setAt(value, l.path, asString ? n : new RawNumber(n)),
        label: `${where(l.path)} := ${asString ? JSON.stringify(n) : n}`,
      })),
    );
  }
  if (arrays.length) {
    options.push(
      fc.tuple(fc.constantFrom(...arrays), fc.constantFrom('object', 'max', 'over', 'badItem', 'dupes', 'nulls')).map(([l, how]) => {
        const max = l.schema.maxItems ?? 10;
        const item = l.schema.items?.pattern?.startsWith('^0x') ? ADDR.alice : 'x';
        const many = (n: number) => Array.from({ length: n }, (_, i) => `0x${i.toString(16).padStart(40, '0')}`);
        const v = how === 'object' ? { 0: item } : how === 'max' ? many(max) : how === 'over' ? many(max + 1) : how === 'badItem' ? [item, 42] : how === 'dupes' ? [item, item, item] : [null];
        return { value: setAt(value, l.path, v), label: `${where(l.path)} := array ${how}` };
      }),
    );
  }
  options.push(
    fc.constantFrom<unknown>(null, [], 'text', 42, true, {}, [[]]).map((v) => ({ value: v, label: `whole body := ${JSON.stringify(v)}` })),
    fc.constant({ value: [value], label: 'whole body := [valid body]' }),
  );
  return fc.oneof(...options);
}

function getAt(root: unknown, path: Path): unknown {
  return path.reduce<any>((v, k) => (v == null ? undefined : v[k]), root);
}

/** JSON text, writing RawNumber as its text. */
function toJson(v: unknown): string {
  if (v instanceof RawNumber) return v.text;
  if (Array.isArray(v)) return `[${v.map(toJson).join(',')}]`;
  if (v !== null && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}:${toJson(x)}`).join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

/** Bodies that are not the JSON they claim to be (or that are, with a twist), made from a valid body's text. */
function rawBodies(text: string): fc.Arbitrary<{ body: Body; label: string }> {
  const firstMember = /^\{("[^"]*":("[^"]*"|[^,}]*))/.exec(text)?.[1];
  const raw = (data: string | Buffer, verdict: 'malformed' | 'valid-if-parsed' | 'either', label: string) => ({ body: { kind: 'raw' as const, data, verdict }, label });
  const pad = (size: number) => {
    // A valid body padded with an unknown member to exactly `size` bytes.
    const base = text === '{}' ? '{"pad":""}' : `{"pad":"",${text.slice(1)}`;
    return base.replace('"pad":""', `"pad":"${'p'.repeat(Math.max(0, size - Buffer.byteLength(base)))}"`);
  };
  return fc.constantFrom(
    raw(text.slice(0, -1), 'malformed', 'truncated JSON'),
    raw(`${text}x`, 'malformed', 'trailing garbage'),
    raw(`${text}${text}`, 'malformed', 'two JSON texts'),
    raw(text.replace(/"/g, "'"), text.includes('"') ? 'malformed' : 'valid-if-parsed', 'single quotes'),
    raw(`/*c*/${text}`, 'malformed', 'comment'),
    raw(text.replace(/}$/, ',}'), 'malformed', 'trailing comma'),
    raw('{"a":NaN}', 'malformed', 'NaN literal'),
    raw('   ', 'malformed', 'white space only'),
    raw(`\ufeff${text}`, 'either', 'byte order mark'),
    raw(`\n\t ${text} \r\n`, 'valid-if-parsed', 'surrounding white space'),
    raw(firstMember ? `{${firstMember},${text.slice(1)}` : '{"a":1,"a":2}', 'malformed', 'member named twice'),
    raw(firstMember ? `{${firstMember.replace(/^"(.)/, (_, c: string) => `"\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)},${text.slice(1)}` : '{"a":1,"\\u0061":2}', 'malformed', 'member named twice, once escaped'),
    raw(text === '{}' ? '{"__proto__":{"x":1}}' : `{"__proto__":{"x":1},${text.slice(1)}`, 'malformed', '__proto__ member'),
    raw(text === '{}' ? '{"constructor":{"prototype":{"x":1}}}' : `{"constructor":{"prototype":{"x":1}},${text.slice(1)}`, 'malformed', 'constructor.prototype member'),
    raw(Buffer.concat([Buffer.from('{"a":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), 'malformed', 'invalid UTF-8'),
    raw(Buffer.concat([Buffer.from('{"a":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]), 'malformed', 'UTF-8 encoded surrogate'),
    raw(`{"a":${'['.repeat(20000)}${']'.repeat(20000)}}`, 'valid-if-parsed', 'deep nesting'),
    raw(pad(BODY_LIMIT), 'valid-if-parsed', `exactly ${BODY_LIMIT} bytes`),
    raw(pad(BODY_LIMIT + 1), 'valid-if-parsed', `${BODY_LIMIT + 1} bytes`),
    raw(pad(200_000), 'valid-if-parsed', '200000 bytes'),
  );
}

// ---------------------------------------------------------------------------------------------
// Parameters, headers and keys

const HEX = '0123456789abcdef';
const ID_PREFIX: Record<string, string> = { policyId: 'sgp_', decisionId: 'dec_', evidenceChainId: 'ec_' };

/** Fixture references by parameter name, per operation (B takes the PUTs and key rotations). */
function paramRefs(op: Op, name: string): string[] {
  if (name === 'policyId') return op.method === 'GET' ? ['policyA', 'policyB', 'policyC'] : ['policyB'];
  if (name === 'decisionId') return ['decHuman0', 'decHuman1', 'decHuman2', 'decHuman3', 'decApprove', 'decBlock'];
  if (name === 'evidenceChainId') return ['chainA', 'chainC'];
  return [];
}

function paramArb(op: Op, p: any, validOnly: boolean): fc.Arbitrary<{ value: string; encoded?: boolean; label: string }> {
  const refs = paramRefs(op, p.name);
  const prefix = ID_PREFIX[p.name] ?? '';
  const validArb = fc.oneof(
    { weight: 4, arbitrary: refs.length ? fc.constantFrom(...refs).map((r) => ({ value: `@@${r}@@`, label: `${p.name}=${r}` })) : fc.constant({ value: 'x', label: 'x' }) },
    { weight: 1, arbitrary: fc.stringMatching(new RegExp(p.schema.pattern, 'u')).map((value) => ({ value, label: `${p.name}=unknown well-formed` })) },
  );
  const hex = (n: number) => fc.string({ unit: fc.constantFrom(...HEX.split('')), minLength: n, maxLength: n });
  const invalid = fc.oneof(
    hex(32).map((h) => ({ value: `${prefix}${h.toUpperCase()}A`, label: `${p.name} uppercase hex` })),
    hex(31).map((h) => ({ value: `${prefix}${h}`, label: `${p.name} 31 hex` })),
    hex(33).map((h) => ({ value: `${prefix}${h}`, label: `${p.name} 33 hex` })),
    hex(32).map((h) => ({ value: `${prefix === 'sgp_' ? 'dec_' : 'sgp_'}${h}`, label: `${p.name} other prefix` })),
    fc.constantFrom('@@adminA@@', '@@agentA@@', '@@orderKey@@').map((value) => ({ value, label: `${p.name} := a key` })),
    fc.constantFrom('ü', ' ', '...', 'null', '0', '-1', 'sgp_😀', `${prefix}${'0'.repeat(32)} `, 'x'.repeat(101), 'x'.repeat(5000)).map((value) => ({ value, label: `${p.name} := ${JSON.stringify(value.slice(0, 20))}` })),
    fc.constantFrom('%00', '%ZZ', '%E0%A4%A', '%C0%AF', '%2F', `${prefix}%30${'0'.repeat(31)}`).map((value) => ({ value, encoded: true, label: `${p.name} raw ${value}` })),
  );
  return validOnly ? validArb : invalid;
}

/** Decisions of policy A (fixtures), as a decision list's cursor. */
const CURSOR_OF_A = ['@@decHuman0@@', '@@decHuman2@@', '@@decBlock@@'];

function queryArb(op: Op, validOnly: boolean): fc.Arbitrary<{ query: Array<[string, string]>; unknown: boolean; labels: string[] }> {
  const qs = op.params.filter((p) => p.in === 'query');
  const each = qs.map((p) => {
    const s = p.schema;
    const matching = fc.stringMatching(new RegExp(s.pattern ?? '^.*$', 'u'));
    const good: fc.Arbitrary<string> =
      s.type === 'integer'
        ? fc.integer({ min: s.minimum ?? 0, max: s.maximum ?? 100 }).map(String)
        : Array.isArray(s.enum)
          ? fc.constantFrom(...s.enum)
          : // A decision list's cursor is one of policy A's decisions, mostly (see CURSOR_OF_A).
            p.name === 'cursor'
            ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...CURSOR_OF_A) }, { weight: 1, arbitrary: matching })
            : matching;
    const bad: fc.Arbitrary<string> =
      s.type === 'integer'
        ? fc.constantFrom('0', '-1', `${(s.maximum ?? 100) + 1}`, '1e1', '0x10', ' 10', '10.0', '+5', '9007199254740993', '', 'ten', '５')
        : Array.isArray(s.enum)
          ? fc.constantFrom('', 'pending', 'approve', `${s.enum[0]} `, 'X')
          : fc.constantFrom('', '-1', '1'.repeat(19), '9007199254740993x', '１', 'a');
    return (validOnly ? fc.oneof(fc.constant(undefined), good.map((v) => ({ v, ok: true }))) : fc.oneof(fc.constant(undefined), good.map((v) => ({ v, ok: true })), bad.map((v) => ({ v, ok: false })), bad.map((v) => ({ v, ok: false })))).map((x) => (x ? { name: p.name as string, ...x } : undefined));
  });
  const extras = fc.constantFrom<[string, string] | undefined>(undefined, ['foo', '1'], ['limit', '1&limit=2'], ['__proto__', 'x'], ['key', '@@adminA@@'], ['@@adminA@@', '1']);
  return fc.tuple(fc.tuple(...each), validOnly ? fc.constant(undefined) : extras).map(([vals, extra]) => {
    const query: Array<[string, string]> = [];
    const labels: string[] = [];
    for (const v of vals) {
      if (!v) continue;
      query.push([v.name, v.v]);
      if (!v.ok) labels.push(`query ${v.name}=${JSON.stringify(v.v)}`);
    }
    if (extra) {
      if (extra[0] === 'limit') query.push(['limit', '1'], ['limit', '2']);
      else query.push(extra);
      labels.push(`extra query ${extra[0]}`);
    }
    return { query, unknown: extra !== undefined && extra[0] !== 'limit', labels };
  });
}

const KEY_NAMES = Object.keys(KEY_KINDS) as KeyName[];

function authArb(op: Op): fc.Arbitrary<AuthChoice> {
  const key = fc.constantFrom(...KEY_NAMES).map((name): AuthChoice => ({ kind: 'key', name }));
  const fakeSecret = fc.string({ unit: fc.constantFrom(...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'.split('')), minLength: 43, maxLength: 43 });
  const raw = fc.oneof(
    fc.constantFrom<AuthChoice>(
      { kind: 'raw', value: '', expect: 'missing' },
      { kind: 'raw', value: 'Bearer', expect: 'missing' },
      { kind: 'raw', value: 'Bearer ', expect: 'missing' },
      { kind: 'raw', value: 'Basic dXNlcjpwYXNz', expect: 'missing' },
      { kind: 'raw', value: 'Bearer null', expect: 'either' },
      { kind: 'raw', value: 'Bearer sgp_admin_', expect: 'either' },
      { kind: 'raw', value: 'Bearer @@policyA@@', expect: 'either' },
      { kind: 'raw', value: '@@adminA@@', expect: 'missing' },
      { kind: 'raw', value: '@@agentA@@', expect: 'missing' },
      { kind: 'raw', value: 'Basic @@adminA@@', expect: 'missing' },
      { kind: 'raw', value: 'Token @@agentA@@', expect: 'missing' },
      { kind: 'raw', value: 'Bearer @@adminA@@x', expect: 'either' },
      { kind: 'raw', value: 'Bearer @@agentA@@x', expect: 'either' },
      { kind: 'raw', value: 'Bearer @@agentA@@ @@adminA@@', expect: 'either' },
      { kind: 'raw', value: 'Bearer "@@agentA@@"', expect: 'either' },
      { kind: 'raw', value: 'Bearer ünïcode', expect: 'either' },
    ),
    fakeSecret.map((s): AuthChoice => ({ kind: 'raw', value: `Bearer sgp_admin_${s}`, expect: 'unknown', keyKind: 'admin' })),
    fakeSecret.map((s): AuthChoice => ({ kind: 'raw', value: `Bearer sgp_agent_${s}`, expect: 'unknown', keyKind: 'agent' })),
  );
  const double = fc.tuple(fc.constantFrom(...KEY_NAMES), fc.constantFrom(...KEY_NAMES)).map(([a, b]): AuthChoice => ({ kind: 'double', names: [a, b] }));
  if (op.security.length === 0) return fc.oneof({ weight: 6, arbitrary: fc.constant<AuthChoice>({ kind: 'none' }) }, { weight: 1, arbitrary: key }, { weight: 1, arbitrary: raw });
  return fc.oneof({ weight: 6, arbitrary: key }, { weight: 1, arbitrary: fc.constant<AuthChoice>({ kind: 'none' }) }, { weight: 2, arbitrary: raw }, { weight: 1, arbitrary: double });
}

const MEDIA_VALUES: Array<[string | null, boolean]> = [
  ['application/json; charset=utf-8', true],
  ['application/json;charset=UTF-8', true],
  ['application/json; charset="utf-8"', true],
  ['Application/JSON', true],
  ['application/json; charset=iso-8859-1', false],
  ['application/json; charset=utf-16', false],
  ['text/plain', false],
  ['text/plain; charset=utf-8', false],
  ['application/x-www-form-urlencoded', false],
  ['multipart/form-data; boundary=x', false],
  ['application/xml', false],
  ['application/problem+json', false],
  ['application/octet-stream', false],
  [null, false],
];

/** Headers of the paid reports: payment, recovery order. */
type PaidHeaders = { headers: Record<string, string>; invalid?: string; wrongOrder?: boolean; badPayment?: boolean; labels: string[] };

/**
 * Headers of the paid reports: payment and recovery order. Valid: none, the (refused) well-formed
 * payment, the fixture order's credentials. Mutated: payloads that are no x402 v2 payment, and
 * recovery credentials that are incomplete, malformed or wrong.
 */
function paidHeadersArb(): { valid: fc.Arbitrary<PaidHeaders>; mutated: fc.Arbitrary<PaidHeaders> } {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const wellFormed = b64(
    JSON.stringify({
      x402Version: 2,
      payload: {
        authorization: { from: ADDR.alice, to: PAY_TO, value: '1000', validAfter: '0', validBefore: '1900000000', nonce: `0x${'ab'.repeat(32)}` },
        signature: `0x${'cd'.repeat(65)}`,
      },
    }),
  );
  type Order = [string | undefined, string | undefined, string | undefined, boolean];
  const make = ([signature, [id, key, invalidOrder, wrongOrder]]: [string | undefined, Order]): PaidHeaders => {
    const invalid = invalidOrder;
    const badPayment = signature !== undefined && signature !== '' && signature !== wellFormed;
    const headers: Record<string, string> = {};
    const labels: string[] = [];
    if (signature !== undefined) (headers['payment-signature'] = signature), labels.push(`payment-signature ${signature === wellFormed ? 'well-formed' : JSON.stringify(signature.slice(0, 20))}`);
    if (id !== undefined) headers['report-id'] = id;
    if (key !== undefined) headers['recovery-key'] = key;
    if (id !== undefined || key !== undefined) labels.push(`report-id ${id ?? '-'} recovery-key ${key === undefined ? '-' : key.slice(0, 14)}`);
    return { headers, labels, ...(invalid ? { invalid } : {}), ...(wrongOrder ? { wrongOrder } : {}), ...(badPayment ? { badPayment } : {}) };
  };
  const none: Order = [undefined, undefined, undefined, false];
  const validSig = fc.constantFrom<string | undefined>(undefined, undefined, undefined, wellFormed, '');
  const validOrder = fc.constantFrom<Order>(none, none, ['@@orderId@@', '@@orderKey@@', undefined, false]);
  const badSig = fc.constantFrom<string | undefined>('garbage', '%%%', b64('null'), b64('[]'), b64('{"x402Version":2}'), b64('{"x402Version":1,"payload":{}}'), b64('{"x402Version":2,"payload":{},"x402Version":2}'), 'é', 'x'.repeat(10000));
  const badOrder = fc.constantFrom<Order>(
    ['@@orderId@@', 'ork_wrong', undefined, true],
    [`ord_${'0'.repeat(32)}`, '@@orderKey@@', undefined, true],
    ['@@orderId@@', undefined, 'Report-Id without Recovery-Key', false],
    [undefined, '@@orderKey@@', 'Recovery-Key without Report-Id', false],
    ['ord_xyz', '@@orderKey@@', 'Report-Id not an order id', false],
    ['@@orderId@@', 'k'.repeat(101), 'Recovery-Key over 100 characters', false],
    ['@@adminA@@', '@@agentA@@', 'keys as order credentials', false],
  );
  return {
    valid: fc.tuple(validSig, validOrder).map(make),
    mutated: fc.oneof(fc.tuple(badSig, validOrder), fc.tuple(validSig, badOrder), fc.tuple(badSig, badOrder)).map(make),
  };
}

/**
 * If-Match. The document: a string; "Send If-Match: "<revision>" to replace only the revision you
 * read (412 otherwise)". HTTP (RFC 9110, 13.1.1): "*" or a list of entity-tags, 412 when none
 * matches. Valid: every well-formed value (a revision, W/ or bare digits as the service also
 * takes, any other entity-tag or list of them, which then does not match: 412). Invalid: values
 * that are no entity-tag at all.
 */
type IfMatch = [string | undefined, 'valid' | 'other' | 'invalid'];
const IF_MATCH_VALUES: IfMatch[] = [
  [undefined, 'valid'],
  [undefined, 'valid'],
  ['"@@revB@@"', 'valid'],
  ['W/"@@revB@@"', 'valid'],
  ['@@revB@@', 'valid'],
  ['*', 'valid'],
  ['"1"', 'valid'],
  ['"999999999"', 'valid'],
  // Well-formed entity-tags (or a list of them) that are no revision this service issues.
  ['"9999999999"', 'other'],
  ['"-1"', 'other'],
  ['"1.0"', 'other'],
  ['"1", "2"', 'other'],
  ['"abc"', 'other'],
  ['"', 'invalid'],
  ['"1', 'invalid'],
  ['"a"b"', 'invalid'],
];

// ---------------------------------------------------------------------------------------------
// The request arbitrary of an operation

function bodyHint(op: Op): (name: string, schema: any) => fc.Arbitrary<unknown> | undefined {
  return (name, schema) => {
    if (name === 'policyId' && schema.type === 'string') return fc.constantFrom('@@policyA@@', '@@policyA@@', '@@policyC@@', '@@policyB@@');
    if (name === 'agentId') return fc.constant(AGENT);
    if (schema.pattern === '^0x[0-9a-fA-F]{40}$') return fc.constantFrom(...ADDRESS_HINTS);
    if (name === 'items' && schema.type === 'string' && schema.pattern?.startsWith('^0x')) return fc.constantFrom(...ADDRESS_HINTS);
    if (/amount|maxPerTransaction|dailyBudget|remainingDailyBudget|requireHumanAbove/i.test(name) && schema.type === 'string') return fc.constantFrom(...AMOUNT_HINTS);
    if (name === 'requestId') return fc.oneof(fc.constantFrom('fixture-human-0', 'fixture-approve', 'fixture-chain-A', 'dup-1'), fc.uuid());
    if (op.path === '/api/orders/recover' && name === 'id') return fc.constant('@@orderId@@');
    if (op.path === '/api/orders/recover' && name === 'key') return fc.constant('@@orderKey@@');
    if (op.path === '/api/orders' && name === 'input') return undefined;
    return undefined;
  };
}

type Dim = 'params' | 'query' | 'auth' | 'paid' | 'ifMatch' | 'body' | 'media' | 'encoding' | 'extra';

/** Headers the document does not name, which change nothing (a request id of the caller's must not be taken, let alone echoed). */
const EXTRA_HEADERS: Array<Record<string, string>> = [
  { 'x-request-id': '@@adminA@@' },
  { 'request-id': '@@agentA@@' },
  { 'x-correlation-id': '@@orderKey@@' },
  { 'x-forwarded-for': '198.51.100.1' },
  { origin: 'https://example.org' },
  { accept: 'application/xml' },
  { accept: 'text/html;q=0.9, */*;q=0.1' },
  { 'accept-encoding': 'gzip' },
  { cookie: 'session=@@adminA@@' },
];

/**
 * A request: every part valid, or one part (sometimes two) mutated, so that the valid requests
 * and each kind of mutation are all well represented whatever the number of runs.
 */
function requestArb(op: Op, ops: Op[]): fc.Arbitrary<Req> {
  const pathParams = op.params.filter((p) => p.in === 'path');
  const isPaid = op.security.includes('x402');
  const hasIfMatch = op.params.some((p) => p.in === 'header' && p.name === 'if-match');
  const hint = bodyHint(op);

  const params = {
    valid: fc.tuple(...pathParams.map((p) => paramArb(op, p, true))),
    mutated: fc.tuple(...pathParams.map((p) => paramArb(op, p, false))),
  };
  const query = { valid: queryArb(op, true), mutated: queryArb(op, false) };
  const auth = {
    valid: op.security.some((s) => s !== 'x402') ? fc.nat(7).map((pick): AuthChoice => ({ kind: 'right', pick })) : fc.constant<AuthChoice>({ kind: 'none' }),
    mutated: authArb(op),
  };
  const paid: { valid: fc.Arbitrary<PaidHeaders>; mutated: fc.Arbitrary<PaidHeaders> } = isPaid ? paidHeadersArb() : { valid: fc.constant({ headers: {}, labels: [] }), mutated: fc.constant({ headers: {}, labels: [] }) };
  const ifMatch = hasIfMatch
    ? { valid: fc.constantFrom(...IF_MATCH_VALUES.filter(([, k]) => k === 'valid')), mutated: fc.constantFrom(...IF_MATCH_VALUES.filter(([, k]) => k !== 'valid')) }
    : { valid: fc.constant<IfMatch>([undefined, 'valid']), mutated: fc.constant<IfMatch>([undefined, 'valid']) };

  let validBody: fc.Arbitrary<unknown> = op.bodySchema ? valid(op.bodySchema, '', hint) : fc.constant(undefined);
  if (op.path === '/api/orders') {
    // A recovery order's input is the request body of the report it names (specification).
    const reportBody = (path: string) => ops.find((o) => o.path === path && o.bodySchema)?.bodySchema;
    validBody = fc.oneof(
      ...['/api/token-risk', '/api/transaction-preflight', '/api/verify-payment', '/api/quick-check'].map((path) =>
        (reportBody(path) ? valid(reportBody(path), '', hint) : fc.constant({})).map((input) => ({ path, input })),
      ),
    );
  }
  type BodyChoice = { body: Body; labels: string[] };
  const body: { valid: fc.Arbitrary<BodyChoice>; mutated: fc.Arbitrary<BodyChoice> } = op.bodySchema
    ? {
        valid: validBody.map((v) => ({ body: { kind: 'json', value: v }, labels: [] })),
        mutated: validBody.chain((v) =>
          fc.oneof(
            { weight: 6, arbitrary: mutateBody(op.bodySchema, v).map((m): BodyChoice => ({ body: { kind: 'json', value: m.value }, labels: [m.label] })) },
            { weight: 3, arbitrary: rawBodies(toJson(v)).map((r): BodyChoice => ({ body: r.body, labels: [r.label] })) },
            { weight: 1, arbitrary: fc.constant<BodyChoice>({ body: { kind: 'none' }, labels: ['no body'] }) },
          ),
        ),
      }
    : {
        valid: fc.constant({ body: { kind: 'none' }, labels: [] }),
        mutated: fc.constantFrom<BodyChoice>(
          { body: { kind: 'json', value: { a: 1 } }, labels: ['unexpected JSON body'] },
          { body: { kind: 'raw', data: '{"a":', verdict: 'malformed' }, labels: ['unexpected malformed body'] },
          { body: { kind: 'raw', data: 'x'.repeat(BODY_LIMIT + 1), verdict: 'malformed' }, labels: ['unexpected oversized body'] },
        ),
      };
  const media = { valid: fc.constantFrom<[string | null, boolean]>(['application/json', true], ['application/json', true], ['application/json', true], ...MEDIA_VALUES.filter(([, ok]) => ok)), mutated: fc.constantFrom(...MEDIA_VALUES.filter(([, ok]) => !ok)) };
  const encoding = { valid: fc.constantFrom<string | undefined>(undefined, undefined, undefined, 'identity'), mutated: fc.constantFrom<string | undefined>('gzip', 'br', 'GZIP', 'deflate') };

  const extra = { valid: fc.constant<Record<string, string>>({}), mutated: fc.constantFrom(...EXTRA_HEADERS) };
  const dims: Dim[] = ['auth', 'body', 'media', 'encoding', 'extra'];
  if (pathParams.length) dims.push('params');
  if (op.params.some((p) => p.in === 'query')) dims.push('query');
  if (isPaid) dims.push('paid');
  if (hasIfMatch) dims.push('ifMatch');
  // Media type and encoding only matter for a body; `body` is weighted up where there is one.
  const weighted = dims.flatMap((d) => (d === 'body' && op.bodySchema ? [d, d, d, d] : (d === 'media' || d === 'encoding') && !op.bodySchema ? [] : [d]));
  const which = fc.oneof(
    { weight: 3, arbitrary: fc.constant<Dim[]>([]) },
    { weight: 6, arbitrary: fc.constantFrom(...weighted).map((d) => [d]) },
    { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...weighted), fc.constantFrom(...weighted)).map(([a, b]) => [...new Set([a, b])]) },
  );
  const pick = <T,>(ds: Dim[], d: Dim, a: { valid: fc.Arbitrary<T>; mutated: fc.Arbitrary<T> }) => (ds.includes(d) ? a.mutated : a.valid);

  const source = fc.oneof({ weight: 3, arbitrary: fc.ipV4() }, { weight: 1, arbitrary: fc.constant(SHARED_SOURCE) });
  return which.chain((ds) =>
    fc
      .record({
        source,
        params: pick(ds, 'params', params),
        query: pick(ds, 'query', query),
        auth: pick(ds, 'auth', auth),
        paid: pick(ds, 'paid', paid),
        ifMatch: pick(ds, 'ifMatch', ifMatch),
        bodyChoice: pick(ds, 'body', body),
        media: pick(ds, 'media', media),
        encoding: pick(ds, 'encoding', encoding),
        extra: pick(ds, 'extra', extra),
      })
      .map(({ source, params, query, auth, paid, ifMatch, bodyChoice, media, encoding, extra }): Req => {
        const labels = [...params.filter((p) => !/=(policy|dec|chain)[A-Z]/.test(p.label)).map((p) => p.label), ...query.labels, ...paid.labels, ...bodyChoice.labels];
        if (auth.kind !== 'right' && auth.kind !== 'none') labels.push(`Authorization ${auth.kind === 'key' ? auth.name : auth.kind === 'raw' ? JSON.stringify(auth.value) : `${auth.names.join(' + ')}`}`);
        if (auth.kind === 'none' && op.security.some((s) => s !== 'x402')) labels.push('no Authorization');
        const headers: Record<string, string> = { ...extra, ...paid.headers };
        for (const k of Object.keys(extra)) labels.push(`header ${k}`);
        if (ifMatch[0] !== undefined) (headers['if-match'] = ifMatch[0]), labels.push(`If-Match ${ifMatch[0]}`);
        let mediaOk = media[1];
        const hasBody = bodyChoice.body.kind !== 'none';
        if (media[0] !== 'application/json' && hasBody) labels.push(`Content-Type ${media[0]}`);
        if (encoding !== undefined) {
          headers['content-encoding'] = encoding;
          labels.push(`Content-Encoding ${encoding}`);
          if (encoding !== 'identity') mediaOk = false;
        }
        // With no body at all there is nothing for a Content-Type or Content-Encoding to describe.
        if (!hasBody) mediaOk = true;
        return {
          labels,
          source,
          params: Object.fromEntries(pathParams.map((p, i) => [p.name, params[i]!])),
          query: query.query,
          ...(query.unknown ? { unknownQuery: true } : {}),
          headers,
          auth,
          body: bodyChoice.body,
          contentType: hasBody ? media[0] : null,
          mediaOk,
          ...(paid.invalid ? { headerInvalid: paid.invalid } : ifMatch[1] === 'invalid' ? { headerInvalid: 'If-Match not an entity-tag' } : {}),
          ...(ifMatch[1] === 'other' ? { ifMatchOther: true } : {}),
          ...(paid.wrongOrder ? { wrongOrder: true } : {}),
          ...(paid.badPayment ? { badPayment: true } : {}),
        };
      }),
  );
}

// ---------------------------------------------------------------------------------------------
// Sending and judging

interface Sent {
  source: string;
  method: string;
  url: string;
  headers: Record<string, string | string[]>;
  payload?: string | Buffer;
}

function resolve(w: World, s: string): string {
  return s.replace(/@@(\w+)@@/g, (_, name: string) => {
    const v = w.refs[name];
    if (v !== undefined) return v;
    // A placeholder whose case a mutation changed stands for the fixture in that case.
    const found = Object.entries(w.refs).find(([k]) => k.toLowerCase() === name.toLowerCase());
    if (!found) throw new Error(`no fixture ${name}`);
    return name === name.toUpperCase() ? found[1].toUpperCase() : found[1].toLowerCase();
  });
}

function resolveDeep(w: World, v: unknown): unknown {
  if (typeof v === 'string') return resolve(w, v);
  if (v instanceof RawNumber) return v;
  if (Array.isArray(v)) return v.map((x) => resolveDeep(w, x));
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [resolve(w, k), resolveDeep(w, x)]));
  return v;
}

function build(w: World, op: Op, r: Req): Sent {
  let path = op.path;
  for (const [name, p] of Object.entries(r.params)) {
    const value = resolve(w, p.value);
    path = path.replace(`{${name}}`, p.encoded ? value : encodeURIComponent(value));
  }
  const qs = r.query.map(([k, v]) => `${encodeURIComponent(resolve(w, k))}=${encodeURIComponent(resolve(w, v))}`).join('&');
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(r.headers)) headers[k] = resolve(w, v);
  if (r.auth.kind === 'key') headers.authorization = `Bearer ${w.refs[r.auth.name]}`;
  if (r.auth.kind === 'right') headers.authorization = `Bearer ${w.refs[rightKey(w, op, r, r.auth.pick)]}`;
  if (r.auth.kind === 'raw') headers.authorization = resolve(w, r.auth.value);
  if (r.auth.kind === 'double') headers.authorization = r.auth.names.map((n) => `Bearer ${w.refs[n]}`);
  let payload: string | Buffer | undefined;
  if (r.body.kind === 'json') payload = toJson(resolveDeep(w, r.body.value));
  if (r.body.kind === 'raw') payload = typeof r.body.data === 'string' ? resolve(w, r.body.data) : r.body.data;
  if (payload !== undefined && r.contentType !== null) headers['content-type'] = r.contentType;
  return { source: r.source, method: op.method, url: qs ? `${path}?${qs}` : path, headers, ...(payload !== undefined ? { payload } : {}) };
}

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
(addFormatsModule as unknown as { default: (a: Ajv2020) => void }).default(ajv);
// The document's own format for addresses: in mixed case, a valid EIP-55 checksum (viem's strict check).
const ADDRESS_FORMAT = 'evm-address';
const noChecksum = (hex: string) => hex === hex.toLowerCase() || hex === hex.toUpperCase();
ajv.addFormat(ADDRESS_FORMAT, { type: 'string', validate: (s: string) => noChecksum(s.slice(2)) || isAddress(s, { strict: true }) });
/** The document's named schemas (components.schemas), which its `#/components/...` references name. */
const DOCUMENT_ID = 'paywarden:openapi.json';
const registerComponents = (doc: { components?: object }) => {
  ajv.removeSchema(DOCUMENT_ID);
  ajv.addSchema({ $id: DOCUMENT_ID, components: doc.components }, DOCUMENT_ID);
};
const compiled = new Map<object, ValidateFunction>();
const validator = (schema: object) => {
  let v = compiled.get(schema);
  const ref = (schema as { $ref?: unknown }).$ref;
  const local = typeof ref === 'string' && ref.startsWith('#/') ? { $ref: DOCUMENT_ID + ref } : schema;
  if (!v) compiled.set(schema, (v = ajv.compile(local)));
  return v;
};

/** What the document (and the text it points to) make of the request: valid, or why not. */
function classify(w: World, op: Op, r: Req, sent: Sent): { invalid: string[]; media: boolean; tooLarge: boolean; ambiguous: string[] } {
  const invalid: string[] = [];
  const ambiguous: string[] = [];
  for (const p of op.params.filter((x) => x.in === 'path')) {
    const given = r.params[p.name]!;
    let value: string;
    try {
      value = given.encoded ? decodeURIComponent(resolve(w, given.value)) : resolve(w, given.value);
    } catch {
      invalid.push(`path ${p.name} not decodable`);
      continue;
    }
    if (!validator(p.schema)(value)) invalid.push(`path ${p.name}`);
  }
  const seen = new Set<string>();
  for (const [k, raw] of r.query) {
    const v = resolve(w, raw);
    const p = op.params.find((x) => x.in === 'query' && x.name === k);
    if (!p) continue;
    if (seen.has(k)) invalid.push(`query ${k} repeated`);
    seen.add(k);
    if (p.schema.type === 'integer') {
      if (!/^-?[0-9]+$/.test(v) || !validator(p.schema)(Number(v))) invalid.push(`query ${k}`);
    } else if (!validator(p.schema)(v)) invalid.push(`query ${k}`);
  }
  if (r.unknownQuery) ambiguous.push('query parameter the document does not list');
  // A well-formed cursor that is not a decision of the policy listed is refused (400) only once
  // the key and policy are known to be right.
  const cursor = r.query.find(([k]) => k === 'cursor')?.[1];
  if (cursor !== undefined && !(CURSOR_OF_A.includes(cursor) && r.params.policyId?.value === '@@policyA@@')) ambiguous.push('cursor of no decision of this policy');
  for (const p of op.params.filter((x) => x.in === 'header')) {
    const v = sent.headers[p.name];
    if (typeof v === 'string' && !validator(p.schema)(v)) invalid.push(`header ${p.name}`);
  }
  if (r.headerInvalid) invalid.push(r.headerInvalid);
  if (r.auth.kind === 'double') invalid.push('two Authorization headers');

  let media = true;
  let tooLarge = false;
  const payload = sent.payload;
  if (op.bodySchema) {
    if (payload !== undefined && Buffer.byteLength(payload) > BODY_LIMIT) tooLarge = true;
    if (payload !== undefined && !r.mediaOk) media = false;
    const empty = payload === undefined || Buffer.byteLength(payload) === 0;
    if (empty) {
      if (op.bodyRequired) invalid.push('no body');
    } else if (r.body.kind === 'raw' && r.body.verdict === 'malformed') {
      invalid.push('malformed body');
    } else {
      const either = r.body.kind === 'raw' && r.body.verdict === 'either';
      const text = (typeof payload === 'string' ? payload : payload.toString('utf8')).replace(either ? /^\ufeff/ : /^$/, '');
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        invalid.push('body not JSON');
      }
      if (value !== undefined || /^\s*null\s*$/.test(text)) {
        if (r.body.kind === 'raw' && r.body.verdict === 'either') ambiguous.push('body the contract leaves open');
        if (hasNonWholeNumber(r.body)) invalid.push('number with fraction or exponent');
        if (!validator(op.bodySchema)(value)) invalid.push(`body: ${ajv.errorsText(validator(op.bodySchema).errors, { dataVar: 'body' }).slice(0, 160)}`);
        // A documentation gap, the service is right: valueWei is a uint256 (native value in wei),
        // which the document's pattern (up to 78 digits) does not say. See the findings.
        else if (typeof (value as { valueWei?: unknown }).valueWei === 'string' && BigInt((value as { valueWei: string }).valueWei) >= 2n ** 256n) invalid.push('valueWei beyond 2^256 - 1');
        else if (op.path === '/api/orders') {
          const o = value as { path: string; input: unknown };
          const report = operations(w.doc).find((x) => x.path === o.path);
          const schema = report?.bodySchema ?? { type: 'object', additionalProperties: false };
          if (!validator(schema)(o.input)) invalid.push('order input is not a valid request of its report');
          else if (typeof (o.input as { valueWei?: unknown })?.valueWei === 'string' && BigInt((o.input as { valueWei: string }).valueWei) >= 2n ** 256n) invalid.push('order input valueWei beyond 2^256 - 1');
        }
      }
    }
  } else if (payload !== undefined && op.method !== 'GET') {
    // An operation without a documented body: what a body sent anyway meets is left open.
    ambiguous.push('body on an operation that documents none');
  }
  return { invalid, media, tooLarge, ambiguous };
}

function hasNonWholeNumber(body: Body): boolean {
  if (body.kind !== 'json') return false;
  const walk = (v: unknown): boolean =>
    v instanceof RawNumber ? /[.eE]/.test(v.text) : typeof v === 'number' ? !Number.isInteger(v) : Array.isArray(v) ? v.some(walk) : v !== null && typeof v === 'object' ? Object.values(v).some(walk) : false;
  return walk(body.value);
}

interface Violation {
  rule: string;
  detail: string;
}

const TITLES_401: Record<string, string> = {
  admin_key_required: 'Admin key required',
  agent_key_required: 'Agent key required',
  agent_bearer_key_required: 'Agent bearer key required',
};

/** The 401 code an authenticated operation answers for no key or a key of the wrong kind. */
function missingKeyCode(op: Op): string | undefined {
  if (op.path.startsWith('/api/evidence-chains')) return 'agent_bearer_key_required';
  if (op.id === 'POST /api/spendpolicy/decisions' || op.id === 'GET /api/spendpolicy/decisions/{decisionId}') return 'agent_key_required';
  if (op.security.includes('adminKey')) return 'admin_key_required';
  return undefined;
}

/** Which policy the request's resource belongs to: a fixture's owner, null for an unknown one. */
function resourceOwner(w: World, op: Op, r: Req): Owner | null | undefined {
  const ownerOf = (text: string): Owner | null => {
    const m = /^@@(\w+)@@$/.exec(text);
    if (!m) return null;
    // Identifiers are lower case: a placeholder lower-cased by a mutation still names the fixture.
    const name = Object.keys(w.owners).find((k) => k === m[1] || (k.toLowerCase() === m[1] && m[1] === m[1]!.toLowerCase()));
    return name ? w.owners[name]! : null;
  };
  const param = Object.values(r.params)[0];
  if (param) return ownerOf(param.value);
  if (r.body.kind === 'json' && r.body.value && typeof r.body.value === 'object' && 'policyId' in r.body.value) return ownerOf(String((r.body.value as { policyId: unknown }).policyId));
  return undefined;
}

function rightKey(w: World, op: Op, r: Req, pick: number): KeyName {
  const kinds = acceptedKinds(op);
  return `${kinds[pick % kinds.length]}${resourceOwner(w, op, r) ?? 'A'}` as KeyName;
}

const ALLOWED_5XX: Record<string, string[]> = {
  'POST /api/token-preview': ['502 upstream_unavailable'],
  'POST /api/token-coverage': ['502 upstream_unavailable'],
  // Policy A has no direct checks; policy C has them and meets the unreachable RPC.
  'POST /api/evidence-chains/{evidenceChainId}/preflight': ['503 direct_checks_disabled', '503 provider_unavailable'],
  'POST /api/evidence-chains/{evidenceChainId}/settlement': ['503 direct_checks_disabled', '503 provider_unavailable'],
};

function judge(w: World, op: Op, r: Req, sent: Sent, res: { statusCode: number; headers: Record<string, any>; body: string }): Violation[] {
  const out: Violation[] = [];
  const v = (rule: string, detail: string) => out.push({ rule, detail });
  const status = res.statusCode;
  const ct = String(res.headers['content-type'] ?? '');
  let body: any;
  try {
    body = res.body.length ? JSON.parse(res.body) : undefined;
  } catch {
    body = undefined;
  }

  // 1. The status is one the document lists for the operation.
  const documented = op.spec.responses?.[String(status)];
  if (!documented) v('undocumented status', `${status} is not among ${Object.keys(op.spec.responses).join(',')}`);

  // 2. No 5xx but the upstream answers this configuration makes.
  if (status >= 500 && !(ALLOWED_5XX[op.id] ?? []).includes(`${status} ${body?.code}`)) v('5xx', `${status} ${body?.code}`);

  // 3. Every response names its request; every error is a DESIGN.md problem body.
  for (const [name, h] of Object.entries<any>(documented?.headers ?? {})) {
    if (h.required && res.headers[name.toLowerCase()] === undefined) v('documented header missing', `${status} without ${name}`);
  }
  const rid = res.headers['x-request-id'];
  if (typeof rid !== 'string' || !rid) v('x-request-id missing', 'no x-request-id header');
  if (status >= 400) {
    if (!/^application\/problem\+json(;|$)/.test(ct)) v('error content-type', `${status} answered as ${ct}`);
    if (!body || typeof body !== 'object' || Array.isArray(body)) v('error body', `not a JSON object: ${res.body.slice(0, 120)}`);
    else {
      for (const k of ['type', 'title', 'code', 'detail', 'requestId']) if (typeof body[k] !== 'string' || !body[k]) v('error body', `${k} missing or not a non-empty string`);
      if (body.status !== status) v('error body', `status member ${body.status} != ${status}`);
      const known = (ERROR_CODES as Record<string, { status: number; title: string }>)[body.code];
      if (!known) v('error code not in the closed set', String(body.code));
      else if (known.status !== status) v('error code status', `${body.code} belongs to ${known.status}, answered ${status}`);
      if (body.requestId !== rid) v('error body', 'requestId != x-request-id');
      // RFC 9110, 15.5.2: a 401 MUST carry WWW-Authenticate; the document declares HTTP bearer schemes.
      if (status === 401 && !/^\s*bearer\b/i.test(String(res.headers['www-authenticate'] ?? ''))) v('401 without WWW-Authenticate: Bearer', `${body.code}`);
      const expectedTitle = TITLES_401[body.code];
      if (expectedTitle && body.title !== expectedTitle) v('401 title', `${body.code}: "${body.title}"`);
      const schema = documented?.content?.['application/problem+json']?.schema;
      if (schema && !validator(schema)(body)) v('error body vs documented schema', ajv.errorsText(validator(schema).errors));
    }
    if (status === 429 && !res.headers['retry-after']) v('429 without Retry-After', '');
    if (op.security.includes('x402') && (status === 402 || status === 412) && !res.headers['payment-required']) v(`${status} without PAYMENT-REQUIRED`, '');
  }

  // 4. Every 2xx body is what the document says.
  if (status >= 200 && status < 300 && documented) {
    const content = documented.content ?? {};
    const types = Object.keys(content);
    const type = types.find((t) => ct.startsWith(t));
    if (types.length && !type) v('2xx content-type', `${ct} is not among ${types.join(',')}`);
    if (type === 'application/json') {
      if (body === undefined) v('2xx body', 'not JSON');
      else if (!validator(content[type].schema)(body)) v('2xx body vs documented schema', ajv.errorsText(validator(content[type].schema).errors).slice(0, 400));
    }
  }

  // 5. Keys are shown once: nothing the caller holds comes back; newly issued keys are fresh.
  const issued = new Set<string>();
  if (status === 201 && op.id === 'POST /api/spendpolicy/policies' && body) [body.adminKey, body.agentKey].forEach((k) => typeof k === 'string' && issued.add(k));
  if (status === 200 && op.id === 'POST /api/spendpolicy/policies/{policyId}/agent-key' && body?.agentKey) issued.add(body.agentKey);
  if (status === 200 && op.id === 'POST /api/spendpolicy/policies/{policyId}/admin-key' && body?.adminKey) issued.add(body.adminKey);
  if (status === 201 && op.id === 'POST /api/orders' && body?.key) issued.add(body.key);
  const headerText = Object.entries(res.headers).map(([k, x]) => `${k}: ${String(x)}`).join('\n');
  for (const s of w.secrets) {
    const secret = s.replace(/^(sgp_admin_|sgp_agent_|ork_)/, '');
    if (res.body.includes(secret) || headerText.includes(secret)) v('key echoed', `${status} ${op.id}: ${s.slice(0, 14)}… comes back (${res.body.includes(secret) ? 'body' : 'header'})`);
  }
  for (const k of issued) {
    if (w.secrets.has(k)) v('issued key not fresh', k.slice(0, 14));
    if (headerText.includes(k)) v('key echoed', 'a newly issued key in a header');
  }

  // A request over a rate limit says only that (its 429 was checked above).
  if (status === 429 && body?.code === 'rate_limited') return out;

  // 6. Invalid requests are refused, valid ones are not (with the media type and size first).
  const c = classify(w, op, r, sent);
  const refused = status === 400 || status === 413 || status === 415;
  const expectedRefusal = !c.media ? 415 : c.tooLarge ? 413 : c.invalid.length ? 400 : undefined;
  if (expectedRefusal !== undefined && status !== expectedRefusal && !(c.ambiguous.length && refused)) {
    // A refusal of another kind is still a refusal when the request is wrong in several ways.
    const alsoWrong = (!c.media ? 1 : 0) + (c.tooLarge ? 1 : 0) + (c.invalid.length ? 1 : 0) > 1;
    if (!(alsoWrong && refused)) v('invalid request not refused as documented', `expected ${expectedRefusal} (${[!c.media && 'media type', c.tooLarge && 'size', ...c.invalid].filter(Boolean).join('; ')}), got ${status} ${body?.code ?? ''}`);
  }
  if (expectedRefusal === undefined && refused && !c.ambiguous.length) v('valid request refused', `${status} ${body?.code ?? ''}: ${body?.detail ?? ''}`.slice(0, 300));

  // 7. The key rules of the specification, for requests that are otherwise valid.
  const missing = missingKeyCode(op);
  if (missing && expectedRefusal === undefined && !c.ambiguous.length && !r.ifMatchOther) {
    const kinds = acceptedKinds(op);
    const a = r.auth;
    const wrongKind = (a.kind === 'key' && !kinds.includes(KEY_KINDS[a.name])) || (a.kind === 'raw' && a.keyKind !== undefined && !kinds.includes(a.keyKind));
    if (a.kind === 'none' || wrongKind || (a.kind === 'raw' && a.expect === 'missing')) {
      if (status !== 401 || body?.code !== missing) v('missing or wrong-kind key', `expected 401 ${missing}, got ${status} ${body?.code ?? ''}`);
    } else if (a.kind === 'raw' && a.expect === 'unknown') {
      if (status !== 404) v('unknown key', `expected 404, got ${status} ${body?.code ?? ''}`);
    } else if (a.kind === 'raw' && a.expect === 'either') {
      if (status !== 401 && status !== 404) v('malformed key', `expected 401 or 404, got ${status} ${body?.code ?? ''}`);
    } else if (a.kind === 'right') {
      const owner = resourceOwner(w, op, r);
      // Once the key's own policy has expired, it answers 410 whatever it names (README).
      if (owner === null && status !== 404 && !(w.flags.expired && status === 410)) v('unknown resource', `expected 404, got ${status} ${body?.code ?? ''}`);
      if (owner && w.flags.expired && status !== 410) v('pilot access ended', `expected 410, got ${status} ${body?.code ?? ''}`);
    } else if (a.kind === 'key') {
      const owner = resourceOwner(w, op, r);
      if (owner !== undefined && owner !== ownerOfKey(a.name) && status !== 404 && !(w.flags.expired && status === 410)) v('key of another policy', `expected 404, got ${status} ${body?.code ?? ''}`);
    }
  }

  semantics(w, op, r, sent, res, v);

  // 9. After the recovery period, the fixture order's credentials answer 410 (specification, Recovery order).
  if (w.flags.expired && expectedRefusal === undefined && !c.ambiguous.length) {
    const fixtureOrder =
      op.id === 'POST /api/orders/recover'
        ? r.body.kind === 'json' && (r.body.value as any)?.id === '@@orderId@@' && (r.body.value as any)?.key === '@@orderKey@@'
        : op.security.includes('x402') && r.headers['report-id'] === '@@orderId@@' && r.headers['recovery-key'] === '@@orderKey@@';
    if (fixtureOrder && status !== 410) v('recovery period ended', `expected 410, got ${status} ${body?.code ?? ''}`);
  }

  // 8. Paid reports: a valid request without payment is a 402 payment request; one whose
  // PAYMENT-SIGNATURE is no x402 v2 payment is refused as a payment: 402 payment_invalid with a
  // fresh challenge (README), before any facilitator call. Recovery credentials are judged first.
  if (op.security.includes('x402') && expectedRefusal === undefined && !c.ambiguous.length && !sent.headers['payment-signature'] && !sent.headers['report-id'] && status !== 402) {
    v('paid report without payment', `expected 402, got ${status} ${body?.code ?? ''}`);
  }
  if (op.security.includes('x402') && expectedRefusal === undefined && !c.ambiguous.length && r.badPayment && !sent.headers['report-id'] && (status !== 402 || body?.code !== 'payment_invalid')) {
    v('malformed payment not refused as a payment', `expected 402 payment_invalid, got ${status} ${body?.code ?? ''}`);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// What the specification and DESIGN.md say about the content of some answers

/** micro-USDC of a decimal amount string (the amount pattern holds). */
const micro = (a: string) => {
  const [whole, frac = ''] = a.split('.');
  return BigInt(whole!) * 1_000_000n + BigInt((frac + '000000').slice(0, 6));
};
/** The canonical form of an amount (DESIGN.md: "12.50" is shown as "12.5"). */
const canonical = (a: string) => {
  const m = micro(a);
  const whole = (m / 1_000_000n).toString();
  const frac = (m % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : whole;
};

/** DESIGN.md section 3, the policy rules table, applied to a free evaluation request. */
function expectedEvaluation(req: any): { decision: string; reasons: string[] } {
  const amount = micro(req.amount);
  const p = req.policy;
  const known = (p.allowedRecipients as string[]).some((x) => x.toLowerCase() === String(req.recipient).toLowerCase());
  const repeats = req.context?.repeatCount ?? 0;
  const proof = req.context?.proofDecision;
  const block: string[] = [];
  const human: string[] = [];
  if (amount > micro(p.maxPerTransaction)) block.push('exceeds_max_per_transaction');
  if (amount > micro(p.remainingDailyBudget)) block.push('exceeds_daily_budget');
  if (!known && p.blockUnknownRecipients) block.push('recipient_not_allowed');
  if (repeats >= p.maxRepeats) block.push('repeat_limit_reached');
  if (proof === 'BLOCK') block.push('proof_blocked');
  if (!known && !p.blockUnknownRecipients) human.push('recipient_unknown');
  if (amount > micro(p.requireHumanAbove)) human.push('above_human_threshold');
  if (proof === 'WARN' || proof === 'INCOMPLETE' || proof === 'UNKNOWN') human.push('proof_inconclusive');
  return { decision: block.length ? 'BLOCK' : human.length ? 'HUMAN_APPROVAL' : 'APPROVE', reasons: [...block, ...human].sort() };
}

const PRICE_MICRO: Record<string, string> = { '/api/token-risk': '250000', '/api/transaction-preflight': '50000', '/api/verify-payment': '10000', '/api/quick-check': '1000' };

function semantics(w: World, op: Op, r: Req, sent: Sent, res: { statusCode: number; headers: Record<string, any>; body: string }, v: (rule: string, detail: string) => void): void {
  const status = res.statusCode;
  let body: any;
  try {
    body = JSON.parse(res.body);
  } catch {
    return;
  }
  const request = (() => {
    try {
      return typeof sent.payload === 'string' ? JSON.parse(sent.payload.replace(/^\ufeff/, '')) : undefined;
    } catch {
      return undefined;
    }
  })();

  // Invariants that hold everywhere (specification): executionAuthorized and automaticPayment are false.
  if (status < 300) {
    const walk = (x: unknown, path: string): void => {
      if (Array.isArray(x)) return x.forEach((y, i) => walk(y, `${path}[${i}]`));
      if (x === null || typeof x !== 'object') return;
      for (const [k, y] of Object.entries(x)) {
        if ((k === 'executionAuthorized' || k === 'automaticPayment') && y !== false && op.path !== '/openapi.json') v('invariant', `${path}.${k} is ${JSON.stringify(y)}`);
        walk(y, `${path}.${k}`);
      }
    };
    walk(body, '');
  }

  // The free evaluation decides by the rules of DESIGN.md section 3 and says it is advisory only.
  if (op.id === 'POST /api/spendpolicy/evaluate' && status === 200 && request) {
    const expected = expectedEvaluation(request);
    const got = { decision: body.decision, reasons: [...(body.reasons ?? [])].sort() };
    if (JSON.stringify(got) !== JSON.stringify(expected)) v('evaluation rules', `expected ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
    for (const [k, x] of [['advisory', true], ['enforced', false], ['executionAuthorized', false], ['automaticPayment', false]] as const) if (body[k] !== x) v('evaluation flags', `${k} is ${JSON.stringify(body[k])}`);
    if (body.agentId !== request.agentId || body.requestId !== request.requestId) v('evaluation echo', 'agentId or requestId differs from the request');
    const checks = (body.optionalChecks ?? []) as any[];
    if (!checks.some((c) => c.endpoint === '/api/transaction-preflight') || !checks.some((c) => c.endpoint === '/api/token-risk')) v('evaluation optional checks', JSON.stringify(checks).slice(0, 200));
    if (checks.some((c) => c.invoked !== false || c.charged !== false)) v('evaluation optional checks', 'a check is invoked or charged');
  }

  // A created policy is the request in canonical form, revision 1, active, 30 days of pilot access.
  if (op.id === 'POST /api/spendpolicy/policies' && status === 201 && request) {
    const rq = request.policy;
    const want = { ...rq, maxPerTransaction: canonical(rq.maxPerTransaction), dailyBudget: canonical(rq.dailyBudget), requireHumanAbove: canonical(rq.requireHumanAbove) };
    if (JSON.stringify(body.policy) !== JSON.stringify(want)) v('created policy', `policy ${JSON.stringify(body.policy)} != ${JSON.stringify(want)}`);
    if (body.name !== request.name || body.agentId !== request.agentId) v('created policy', 'name or agentId differs from the request');
    if (body.revision !== 1 || body.status !== 'active' || body.agentStatus !== 'active' || body.directChecks !== false) v('created policy', `revision ${body.revision}, status ${body.status}/${body.agentStatus}, directChecks ${body.directChecks}`);
    if (Date.parse(body.accessExpiresAt) - Date.parse(body.createdAt) !== 30 * 86_400_000) v('created policy', `access ${body.createdAt} .. ${body.accessExpiresAt} is not 30 days`);
    if (!/^sgp_admin_[A-Za-z0-9_-]{43}$/.test(body.adminKey) || !/^sgp_agent_[A-Za-z0-9_-]{43}$/.test(body.agentKey) || body.adminKey === body.agentKey) v('created policy keys', 'keys are not two distinct sgp_admin_/sgp_agent_ keys');
    if (!/^sgp_[0-9a-f]{32}$/.test(body.policyId)) v('created policy', `policyId ${body.policyId}`);
  }

  // A replaced policy carries the new rules and the next revision.
  if (op.id === 'PUT /api/spendpolicy/policies/{policyId}' && status === 200 && request && r.params.policyId?.value === '@@policyB@@') {
    const rq = request.policy;
    const want = { ...rq, maxPerTransaction: canonical(rq.maxPerTransaction), dailyBudget: canonical(rq.dailyBudget), requireHumanAbove: canonical(rq.requireHumanAbove) };
    if (JSON.stringify(body.policy) !== JSON.stringify(want)) v('replaced policy', `policy ${JSON.stringify(body.policy)} != ${JSON.stringify(want)}`);
    if (body.revision !== Number(w.refs.revB) + 1) v('replaced policy', `revision ${body.revision} after ${w.refs.revB}`);
    for (const k of ['name', 'status', 'agentStatus']) if (request[k] !== undefined && body[k] !== request[k]) v('replaced policy', `${k} ${JSON.stringify(body[k])} != ${JSON.stringify(request[k])}`);
    if (res.headers.etag !== `"${body.revision}"`) v('replaced policy', `ETag ${res.headers.etag} for revision ${body.revision}`);
  }

  // A protected decision: the request's policy, amount in canonical form, approval only when HUMAN_APPROVAL.
  if (op.id === 'POST /api/spendpolicy/decisions' && status === 200 && request) {
    const d = body.decision;
    if (d.policyId !== request.policyId || d.requestId !== request.requestId || d.agentId !== request.agentId) v('decision', 'policyId, requestId or agentId differs from the request');
    if (d.amount !== canonical(request.amount)) v('decision', `amount ${d.amount} for ${request.amount}`);
    if ((d.decision === 'HUMAN_APPROVAL') !== (d.approval !== null)) v('decision', `approval ${JSON.stringify(d.approval)} with ${d.decision}`);
    if (body.receipt?.alg !== 'EdDSA' || !/^sha256:[0-9a-f]{64}$/.test(body.receipt?.digest ?? '')) v('decision receipt', JSON.stringify(body.receipt).slice(0, 200));
  }

  // A new evidence chain: 201 not replayed, 200 replayed (specification, Evidence chain).
  if (op.id === 'POST /api/evidence-chains' && (status === 200 || status === 201)) {
    if (body.replayed !== (status === 200)) v('evidence chain', `${status} with replayed ${body.replayed}`);
    if (!/^ec_[0-9a-f]{32}$/.test(body.evidenceChainId)) v('evidence chain', `evidenceChainId ${body.evidenceChainId}`);
  }

  // No Base is reachable here: a settlement reading is UNKNOWN ("the chain could not be read"), recorded.
  if (op.id === 'POST /api/evidence-chains/{evidenceChainId}/settlement' && status === 200 && request) {
    if (body.result !== 'UNKNOWN') v('settlement', `result ${body.result} while Base cannot be read`);
    if (String(body.txHash).toLowerCase() !== String(request.txHash).toLowerCase()) v('settlement', `txHash ${body.txHash} for ${request.txHash}`);
  }

  // A recovery order: ord_ id, a key, and a recovery period of 7 days (DESIGN.md default).
  if (op.id === 'POST /api/orders' && status === 201) {
    if (!/^ord_[0-9a-f]{32}$/.test(body.id) || typeof body.key !== 'string' || !body.key) v('order', `id ${body.id}`);
    if (Date.parse(body.expiresAt) - w.t.clock.now().getTime() !== 7 * 86_400_000) v('order', `expiresAt ${body.expiresAt}`);
  }
  if (status === 202 && !res.headers['retry-after']) v('202 without Retry-After', op.id);
  if (status === 402 && body.code !== 'payment_required' && body.code !== 'payment_invalid') v('402 code', String(body.code));

  // A 402 without payment is the x402 v2 challenge for this report's price on Base.
  if (op.security.includes('x402') && status === 402 && typeof res.headers['payment-required'] === 'string') {
    let challenge: any;
    try {
      challenge = JSON.parse(Buffer.from(res.headers['payment-required'], 'base64').toString('utf8'));
    } catch {
      v('402 challenge', 'PAYMENT-REQUIRED is not base64 JSON');
      return;
    }
    const a = challenge.accepts?.[0];
    if (challenge.x402Version !== 2 || a?.network !== 'eip155:8453' || a?.scheme !== 'exact' || a?.asset?.toLowerCase() !== USDC.toLowerCase() || a?.amount !== PRICE_MICRO[op.path] || a?.payTo?.toLowerCase() !== PAY_TO) {
      v('402 challenge', JSON.stringify({ x402Version: challenge.x402Version, network: a?.network, scheme: a?.scheme, asset: a?.asset, amount: a?.amount, payTo: a?.payTo }));
    }
  }
}

/** After a response that changes the world, the fixtures follow (a rotated key, a new revision). */
function learn(w: World, op: Op, r: Req, res: { statusCode: number; headers: Record<string, any>; body: string }) {
  if (res.statusCode >= 300 || !String(res.headers['content-type']).startsWith('application/json')) return;
  const body = JSON.parse(res.body);
  if (op.id === 'POST /api/spendpolicy/policies') (w.secrets.add(body.adminKey), w.secrets.add(body.agentKey));
  if (op.id === 'POST /api/orders') w.secrets.add(body.key);
  if (op.id === 'POST /api/spendpolicy/policies/{policyId}/agent-key' && r.params.policyId?.value === '@@policyB@@') {
    w.refs.agentB = body.agentKey;
    w.secrets.add(body.agentKey);
  }
  if (op.id === 'POST /api/spendpolicy/policies/{policyId}/admin-key' && r.params.policyId?.value === '@@policyB@@') {
    w.refs.adminB = body.adminKey;
    w.secrets.add(body.adminKey);
  }
  if (op.id === 'PUT /api/spendpolicy/policies/{policyId}' && r.params.policyId?.value === '@@policyB@@') w.refs.revB = String(body.revision);
}

// ---------------------------------------------------------------------------------------------

function describeRequest(sent: Sent): string {
  const headers = Object.entries(sent.headers)
    .map(([k, v]) => `${k}: ${[v].flat().map((x) => redact(String(x).length > 60 ? `${String(x).slice(0, 60)}…(${String(x).length} chars)` : String(x))).join(' | ')}`)
    .join('; ');
  const payload = sent.payload === undefined ? '' : typeof sent.payload === 'string' ? sent.payload : `<bytes ${sent.payload.toString('hex').slice(0, 60)}>`;
  return `${sent.source === SHARED_SOURCE ? `(from ${SHARED_SOURCE}) ` : ''}${sent.method} ${redact(sent.url)}${headers ? ` [${headers}]` : ''}${payload ? ` ${redact(payload.length > 300 ? `${payload.slice(0, 300)}…(${payload.length} chars)` : payload)}` : ''}`;
}
const redact = (s: string) => s.replace(/(sgp_(?:admin|agent)_|ork_)[A-Za-z0-9_-]{20,}/g, '$1…');

/** Runs `numRuns` generated requests against one operation; one smallest example per kind of violation. */
async function fuzzOperation(w: World, op: Op, ops: Op[], numRuns: number, seed: number): Promise<string[]> {
  const found = new Map<string, { size: number; text: string }>();
  const statuses = new Map<number, number>();
  const started = Date.now();
  let slowest = { ms: 0, what: '' };
  await fc.assert(
    fc.asyncProperty(requestArb(op, ops), async (r) => {
      const sent = build(w, op, r);
      const t0 = performance.now();
      const res = await w.t.app.inject({ method: sent.method as 'GET', url: sent.url, headers: sent.headers, remoteAddress: sent.source, ...(sent.payload !== undefined ? { payload: sent.payload } : {}) });
      const ms = performance.now() - t0;
      if (ms > slowest.ms) slowest = { ms, what: `${res.statusCode} ${r.labels.join('; ').slice(0, 120)}` };
      statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      let body: any;
      try {
        body = JSON.parse(res.body);
      } catch {
        body = undefined;
      }
      for (const violation of judge(w, op, r, sent, res)) {
        const key = `${violation.rule} | ${res.statusCode} ${body?.code ?? ''}`;
        const request = describeRequest(sent);
        const text = `${op.id}: ${key}\n      ${violation.detail}\n      request: ${request}\n      mutations: ${r.labels.join('; ') || '(none: valid request)'}\n      response: ${res.statusCode} ${redact(res.body.slice(0, 300))}`;
        const prev = found.get(key);
        if (!prev || request.length < prev.size) found.set(key, { size: request.length, text });
      }
      learn(w, op, r, res);
    }),
    { seed, numRuns, endOnFailure: true },
  );
  if (VERBOSE) console.log(`${w.flags.expired ? '(after 31 days) ' : ''}${op.id}: ${numRuns} requests in ${Date.now() - started} ms; statuses ${JSON.stringify(Object.fromEntries(statuses))}; slowest ${slowest.ms.toFixed(0)} ms (${slowest.what})`);
  return [...found.values()].map((f) => f.text);
}

describe('OpenAPI-driven fuzzing of every documented operation', () => {
  const w = suiteFixture(makeWorld, 120_000);

  it('the document lists exactly the operations this test fuzzes', () => {
    expect(operations(w.doc).map((o) => o.id).sort()).toEqual([...OPERATIONS].sort());
  });

  it.each(OPERATIONS)('%s conforms to the document, the specification and DESIGN.md', async (id) => {
    const ops = operations(w.doc);
    const op = ops.find((o) => o.id === id);
    expect(op, `${id} is not in /openapi.json`).toBeDefined();
    if (!op) return;
    const hasInput = op.params.length > 0 || op.bodySchema !== undefined;
    const report = await fuzzOperation(w, op, ops, hasInput ? RUNS : Math.max(5, Math.ceil(RUNS / 6)), SEED);
    expect(report, `${id}: ${report.length} kind(s) of violation\n${report.join('\n\n')}`).toEqual([]);
  });

  // Last: the clock moves past the 30 days of pilot access (and the 7-day recovery period) of every
  // policy and order made so far. Every endpoint of those policies answers 410 (specification,
  // Authentication 3 and Evidence chains; README), and everything else still conforms.
  it('after 31 days, every operation still conforms and the fixtures\' policies answer 410', async () => {
    w.t.clock.advance(31 * 86_400_000);
    w.flags.expired = true;
    const ops = operations(w.doc);
    const report: string[] = [];
    for (const op of ops) {
      const hasInput = op.params.length > 0 || op.bodySchema !== undefined;
      if (!hasInput) continue;
      report.push(...(await fuzzOperation(w, op, ops, Math.max(10, Math.ceil(RUNS / 3)), SEED + 1)));
    }
    expect(report, `${report.length} kind(s) of violation\n${report.join('\n\n')}`).toEqual([]);
  });
});
