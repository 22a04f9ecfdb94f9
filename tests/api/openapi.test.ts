import { Validator } from '@seriousme/openapi-schema-validator';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { OPTIONAL_BODY } from '../../src/platform/openapi.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { bearer, createPolicy } from '../helpers/policies.js';

/**
 * Fastify 5 has no public list of registered routes, and buildApp registers them before a test
 * could add an onRoute hook. So every Fastify instance created in this file gets an onRoute hook
 * the moment it is created; the hook sees each route exactly as Fastify registers it.
 */
const seen = vi.hoisted(() => [] as Array<{ method: string; url: string }>);
vi.mock('fastify', async (importOriginal) => {
  const mod = await importOriginal<typeof import('fastify')>();
  const original = mod.default as unknown as (opts?: unknown) => any;
  const wrapped = (opts?: unknown) => {
    const app = original(opts);
    app.addHook('onRoute', (route: { method: string | string[]; url: string }) => {
      for (const method of [route.method].flat()) seen.push({ method, url: route.url });
    });
    return app;
  };
  Object.assign(wrapped, original);
  return { ...mod, default: wrapped, fastify: wrapped };
});

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const;

/** Fastify's /a/:id is OpenAPI's /a/{id}. */
const toOpenApiPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');

describe('GET /openapi.json', () => {
  let t: TestApp;
  let doc: any;
  beforeAll(async () => {
    seen.length = 0;
    t = await createTestApp();
    const res = await t.app.inject({ method: 'GET', url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    doc = json(res);
  });
  afterAll(async () => {
    await t.close();
  });

  it('is built and serialized once, not on every request (312 KB cost 10 ms of CPU each), the same bytes every time', async () => {
    const build = vi.spyOn(t.app, 'swagger');
    const answers = await Promise.all([1, 2, 3].map(() => t.app.inject({ method: 'GET', url: '/openapi.json' })));
    expect(build).not.toHaveBeenCalled();
    expect(new Set(answers.map((a) => a.body)).size).toBe(1);
    expect(json(answers[0]!)).toEqual(doc);
    build.mockRestore();
  });

  it('is a valid OpenAPI 3.1 document according to a third-party validator', async () => {
    const validator = new Validator();
    const result = await validator.validate(doc);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('the validator is not a rubber stamp', async () => {
    const broken = structuredClone(doc);
    delete broken.info;
    expect((await new Validator().validate(broken)).valid).toBe(false);
  });

  it('declares OpenAPI 3.1.0 and the interface version 1.5.0-rc.1', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.info.version).toBe('1.5.0-rc.1');
    expect(typeof doc.info.title).toBe('string');
  });

  it('has bearer security schemes for the admin and the agent key', () => {
    const schemes = Object.values(doc.components.securitySchemes) as Array<Record<string, string>>;
    const bearer = schemes.filter((s) => s.type === 'http' && s.scheme?.toLowerCase() === 'bearer');
    expect(bearer.some((s) => /admin/i.test(s.description ?? ''))).toBe(true);
    expect(bearer.some((s) => /agent/i.test(s.description ?? ''))).toBe(true);
    expect(bearer.length).toBeGreaterThanOrEqual(2);
  });

  it('describes the x402 payment', () => {
    const text = JSON.stringify(doc);
    expect(doc.info.description).toMatch(/x402/);
    expect(doc.info.description).toContain('PAYMENT-REQUIRED');
    expect(doc.info.description).toContain('PAYMENT-SIGNATURE');
    expect(doc.info.description).toContain('eip155:8453');
    expect(text).toMatch(/402/);
  });

  it('lists every registered route', () => {
    const routes = seen.filter((r) => r.method !== 'HEAD' && r.method !== 'OPTIONS');
    // The hook saw the service's routes (a guard against this test passing on an empty list).
    expect(routes).toEqual(expect.arrayContaining([
      { method: 'GET', url: '/healthz' },
      { method: 'POST', url: '/api/spendpolicy/evaluate' },
      { method: 'POST', url: '/api/pilot-leads' },
      { method: 'GET', url: '/openapi.json' },
    ]));
    const missing = routes
      .filter((r) => !doc.paths?.[toOpenApiPath(r.url)]?.[r.method.toLowerCase()])
      .map((r) => `${r.method} ${r.url}`);
    expect(missing).toEqual([]);
  });

  it('lists no operation that is not served', () => {
    const extra: string[] = [];
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
      for (const method of HTTP_METHODS) {
        if (!item[method]) continue;
        const url = path.replace(/\{([^}]+)\}/g, ':$1');
        if (!t.app.hasRoute({ method: method.toUpperCase() as 'GET', url })) extra.push(`${method.toUpperCase()} ${path}`);
      }
    }
    expect(extra).toEqual([]);
  });

  /** A schema, or the components schema its local $ref names. */
  const deref = (schema: any): any => {
    if (typeof schema?.$ref !== 'string') return schema;
    expect(schema.$ref).toMatch(/^#\/components\/schemas\/[A-Za-z0-9]+$/);
    return doc.components.schemas[schema.$ref.split('/').at(-1)];
  };

  it('names the problem body once, as components.schemas.Problem, which every error response references', () => {
    const problem = doc.components.schemas.Problem;
    expect(problem).toMatchObject({ type: 'object', description: 'RFC 9457 problem body' });
    expect(problem.required).toEqual(['type', 'title', 'status', 'code', 'detail', 'requestId']);
    expect(Object.keys(problem.properties)).toEqual(['type', 'title', 'status', 'code', 'detail', 'requestId', 'errors', 'retryAfter']);
    // No inline copy left anywhere: each became a type of its own in generated clients.
    expect(JSON.stringify(doc.paths)).not.toContain('Stable machine-readable error code');
    expect(JSON.stringify(doc.paths).match(/"#\/components\/schemas\/Problem"/g)!.length).toBeGreaterThan(150);
  });

  /** Every operation of the document, as [`method path`, operation]. */
  const operations = () =>
    Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
      Object.entries(ops).filter(([method]) => (HTTP_METHODS as readonly string[]).includes(method)).map(([method, op]) => [`${method} ${path}`, op] as const),
    );

  it('names every operation with a unique operationId, which generated clients make their function names', () => {
    const ops = operations();
    expect(ops.length).toBe(31);
    const missing = ops.filter(([, op]) => typeof op.operationId !== 'string').map(([name]) => name);
    expect(missing).toEqual([]);
    const ids = ops.map(([, op]) => op.operationId as string);
    expect(ids.filter((id) => !/^[a-z][A-Za-z0-9]*$/.test(id))).toEqual([]);
    expect(ids.filter((id, i) => ids.indexOf(id) !== i)).toEqual([]);
    expect(doc.paths['/api/spendpolicy/decisions'].post.operationId).toBe('createDecision');
    // The paid reports carry their names from the price table the catalogue shows.
    expect(doc.paths['/api/verify-payment'].post.operationId).toBe('paymentProof');
  });

  it('declares every tag an operation uses', () => {
    const declared = (doc.tags as Array<{ name: string; description?: string }>).map((t) => t.name);
    const used = [...new Set(operations().flatMap(([, op]) => op.tags as string[]))];
    expect(used.filter((t) => !declared.includes(t))).toEqual([]);
  });

  it('says which key every operation takes: a bearer scheme where a 401 is possible, and an explicit empty requirement where none is needed', () => {
    const bearerSchemes = Object.entries(doc.components.securitySchemes as Record<string, { type: string }>).filter(([, s]) => s.type === 'http').map(([n]) => n);
    for (const [name, op] of operations()) {
      expect(Array.isArray(op.security), name).toBe(true);
      const bearer = (op.security as Array<Record<string, unknown>>).some((req) => Object.keys(req).some((k) => bearerSchemes.includes(k)));
      expect(bearer, name).toBe('401' in op.responses);
    }
    expect(doc.paths['/api/spendpolicy/evaluate'].post.security).toEqual([]);
    expect(doc.paths['/api/token-risk'].post.security).toEqual([{ x402: [] }]);
  });

  it('documents a 503 problem on every operation: any request may meet a shutdown or a storage failure', () => {
    const ops = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, o]) => Object.entries(o).map(([m, op]) => [`${m} ${path}`, op]));
    expect(ops.length).toBeGreaterThan(20);
    for (const [name, op] of ops) {
      const unavailable = op.responses['503'];
      expect(deref(unavailable?.content?.['application/problem+json']?.schema)?.required, name).toEqual(expect.arrayContaining(['code', 'requestId']));
      expect(unavailable.description, name).toMatch(/Storage unavailable.*Shutting down/);
      expect(unavailable.headers?.['Retry-After']?.schema?.type, name).toBe('integer');
      if (op.responses['401']) expect(op.responses['401'].headers?.['WWW-Authenticate']?.required, name).toBe(true);
    }
    expect(ops.filter(([, op]) => op.responses['401']).length).toBeGreaterThan(8);
    // Every response says what it is: none keeps the generator's placeholder.
    const placeholders = ops.flatMap(([name, op]) => Object.entries(op.responses as Record<string, { description: string }>).filter(([, r]) => r.description === 'Default Response').map(([status]) => `${name} ${status}`));
    expect(placeholders).toEqual([]);
  });

  it('documents 413 and 415 on every operation that reads a body, and on no GET (Fastify reads no body there)', () => {
    const ops = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, o]) => Object.entries(o).map(([m, op]) => [m, `${m} ${path}`, op]));
    const bodyStatuses = (op: any) => ['413', '415'].filter((status) => status in op.responses);
    expect(ops.filter(([m, , op]) => m === 'get' && bodyStatuses(op).length > 0).map(([, name]) => name)).toEqual([]);
    expect(ops.filter(([m, , op]) => m !== 'get' && bodyStatuses(op).length < 2).map(([, name]) => name)).toEqual([]);
  });

  it('marks the bodies of the approval and the key rotations optional, as a bare POST does, and every other body required', () => {
    const bodies = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
      Object.entries(ops).flatMap(([method, op]) => (op?.requestBody ? [[`${method} ${path}`, op.requestBody.required, OPTIONAL_BODY in op]] : [])),
    );
    const optional = ['post /api/spendpolicy/decisions/{decisionId}/approve', 'post /api/spendpolicy/policies/{policyId}/agent-key', 'post /api/spendpolicy/policies/{policyId}/admin-key'];
    for (const op of optional) expect(bodies).toContainEqual([op, false, false]);
    expect(bodies.filter(([, required]) => required !== true).map(([op]) => op).sort()).toEqual(optional.sort());
    expect(bodies.filter(([, , marked]) => marked)).toEqual([]);
  });

  it('documents the evaluation request from the route schema, not by hand', () => {
    const op = doc.paths['/api/spendpolicy/evaluate'].post;
    const schema = op.requestBody.content['application/json'].schema;
    expect(schema.additionalProperties).toBe(false);
    expect(schema.required).toEqual(expect.arrayContaining(['agentId', 'requestId', 'chain', 'asset', 'recipient', 'amount', 'policy']));
    expect(schema.properties.policy.additionalProperties).toBe(false);
    expect(schema.properties.context.additionalProperties).toBe(false);
    expect(schema.properties.policy.properties.maxRepeats).toMatchObject({ type: 'integer', minimum: 1 });
    expect(schema.properties.context.properties.repeatCount).toMatchObject({ type: 'integer', minimum: 0 });
    expect(schema.properties.context.properties.proofDecision.enum).toEqual(['ALLOW', 'WARN', 'BLOCK', 'INCOMPLETE', 'UNKNOWN']);
    for (const status of ['200', '400', '429']) expect(op.responses[status], status).toBeDefined();
  });

  it('documents the 402 of every paid report as a problem body with the PAYMENT-REQUIRED header', () => {
    for (const [path, method] of [['/api/quick-check', 'get'], ['/api/token-risk', 'post'], ['/api/transaction-preflight', 'post'], ['/api/verify-payment', 'post']] as const) {
      const res = doc.paths[path][method].responses['402'];
      expect(res, path).toBeDefined();
      expect(res.headers?.['PAYMENT-REQUIRED']?.schema?.type, path).toBe('string');
      const schema = deref(Object.values(res.content as Record<string, { schema: any }>)[0]!.schema);
      expect(schema.required, path).toEqual(expect.arrayContaining(['type', 'title', 'status', 'code', 'requestId']));
      expect(res.description, path).toMatch(/payment_required/);
      expect(res.description, path).toMatch(/payment_invalid/);
    }
  });

  /** The headers a caller reads; each one an answer carries must be documented for its status. */
  const READ_HEADERS = ['etag', 'retry-after', 'payment-required', 'payment-response', 'x-request-id', 'www-authenticate'];
  const expectDocumented = (method: string, path: string, res: { statusCode: number; headers: Record<string, unknown> }) => {
    const documented = doc.paths[path]?.[method]?.responses?.[String(res.statusCode)];
    expect(documented, `${method} ${path} ${res.statusCode}`).toBeDefined();
    const media = String(res.headers['content-type']).split(';')[0]!;
    expect(Object.keys(documented.content ?? {}), `${method} ${path} ${res.statusCode}`).toContain(media);
    const names = Object.keys(documented.headers ?? {}).map((h) => h.toLowerCase());
    for (const h of READ_HEADERS) if (res.headers[h] !== undefined) expect(names, `${method} ${path} ${res.statusCode}`).toContain(h);
    for (const [name, h] of Object.entries(documented.headers ?? {}) as Array<[string, { required?: boolean }]>) {
      if (h.required) expect(res.headers[name.toLowerCase()], `${method} ${path} ${res.statusCode} ${name}`).toBeDefined();
    }
  };

  it('says what the answers carry: their media type (problem+json for errors) and their headers', async () => {
    const inject = (method: 'GET' | 'POST' | 'PUT', url: string, opts: { headers?: Record<string, string>; payload?: string | object } = {}) =>
      t.app.inject({ method, url, ...opts } as InjectOptions);
    const p = await createPolicy(t);
    const policyPath = '/api/spendpolicy/policies/{policyId}';
    const url = `/api/spendpolicy/policies/${p.policyId}`;
    const get = await inject('GET', url, { headers: bearer(p.adminKey) });
    expect(get.headers.etag).toBe('"1"');
    const answers: Array<[string, string, Awaited<ReturnType<typeof inject>>]> = [
      ['get', policyPath, get],
      ['get', policyPath, await inject('GET', url)],
      ['put', policyPath, await inject('PUT', url, { headers: { ...bearer(p.adminKey), 'if-match': '"9"' }, payload: { policy: json<any>(get).policy } })],
      ['post', '/api/spendpolicy/evaluate', await inject('POST', '/api/spendpolicy/evaluate', { payload: { nope: 1 } })],
      ['post', '/api/spendpolicy/evaluate', await inject('POST', '/api/spendpolicy/evaluate', { payload: 'x', headers: { 'content-type': 'text/plain' } })],
      ['get', '/terms', await inject('GET', '/terms')],
      ['get', '/privacy', await inject('GET', '/privacy')],
      ['get', '/api/services', await inject('GET', '/api/services')],
      ['get', '/openapi.json', await inject('GET', '/openapi.json')],
      // Refused before any route runs, on an operation whose own schema names no 400.
      ['get', '/healthz', await inject('GET', '/healthz', { headers: { authorization: ['Bearer a', 'Bearer b'] } as unknown as Record<string, string> })],
    ];
    expect(answers.map(([, , r]) => r.statusCode)).toEqual([200, 401, 412, 400, 415, 200, 200, 200, 200, 400]);
    // Served whole: the response schema of the document keeps every member.
    expect(json(answers.at(-2)![2])).toEqual(doc);
    for (const [method, path, res] of answers) expectDocumented(method, path, res);
  });

  it('documents Retry-After on every 429, and application/problem+json for every error', () => {
    let errors = 0;
    for (const [path, operations] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(operations)) {
        for (const [status, res] of Object.entries(op.responses as Record<string, any>)) {
          expect(res.headers?.['x-request-id']?.required, `${method} ${path} ${status}`).toBe(true);
          if (Number(status) < 400) continue;
          errors++;
          expect(Object.keys(res.content), `${method} ${path} ${status}`).toEqual(['application/problem+json']);
          // DESIGN.md section 3: every error body has these members (problemBody always writes detail).
          expect(res.content['application/problem+json'].schema, `${method} ${path} ${status}`).toEqual({ $ref: '#/components/schemas/Problem' });
          expect(deref(res.content['application/problem+json'].schema).required, `${method} ${path} ${status}`).toEqual(expect.arrayContaining(['type', 'title', 'status', 'code', 'detail', 'requestId']));
          if (status === '429') expect(res.headers?.['Retry-After']?.schema?.type, `${method} ${path}`).toBe('integer');
        }
      }
    }
    expect(errors).toBeGreaterThan(100);
  });

  it('documents the pilot-lead request and its 201, 400 and 429', () => {
    const op = doc.paths['/api/pilot-leads'].post;
    const schema = op.requestBody.content['application/json'].schema;
    expect(schema.additionalProperties).toBe(false);
    expect(schema.properties.email.format).toBe('email');
    expect(schema.properties.company.maxLength).toBe(120);
    expect(schema.properties.needs).toMatchObject({ minLength: 10, maxLength: 1200 });
    expect(schema.properties.monthlyDecisions.enum).toEqual(['under-1k', '1k-10k', '10k-100k', 'over-100k', 'not-sure']);
    for (const status of ['201', '400', '429']) expect(op.responses[status], status).toBeDefined();
  });
});
