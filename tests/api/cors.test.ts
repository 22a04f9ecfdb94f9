import { describe, expect, it } from 'vitest';
import { EVALUATE_BODY } from '../../bench/targets/evaluate.js';
import { createTestApp } from '../helpers/app.js';
import { expectProblem } from '../helpers/problems.js';
import { suiteFixture } from '../helpers/suite.js';

const ORIGIN = 'https://wallet.example';

describe('CORS', () => {
  const t = suiteFixture(() => createTestApp());

  const evaluate = (headers: Record<string, string> = {}) =>
    t.app.inject({ method: 'POST', url: '/api/spendpolicy/evaluate', headers, payload: EVALUATE_BODY });

  it('a browser request gets its origin back, Vary: Origin and the exposed headers', async () => {
    const res = await evaluate({ origin: ORIGIN });
    expect(res.statusCode).toBe(200);
    expect(res.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(res.headers.vary).toBe('Origin');
    const exposed = String(res.headers['access-control-expose-headers']).split(/\s*,\s*/);
    expect(exposed).toEqual(expect.arrayContaining(['x-request-id', 'retry-after', 'payment-required', 'payment-response', 'etag']));
  });

  it('an error answer carries the CORS headers too, so a page can read the problem body', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/spendpolicy/evaluate', headers: { origin: ORIGIN }, payload: {} });
    expect(res.statusCode).toBe(400);
    expect(res.headers['access-control-allow-origin']).toBe(ORIGIN);
  });

  it('a request without an Origin gets no CORS headers; a GET says it varies by Origin', async () => {
    const res = await evaluate();
    expect(res.statusCode).toBe(200);
    expect(res.headers['access-control-allow-origin']).toBeUndefined();
    expect(res.headers['access-control-expose-headers']).toBeUndefined();
    const get = await t.app.inject({ method: 'GET', url: '/api/services' });
    expect(get.headers.vary).toBe('Origin');
    expect(get.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('a preflight is answered 204 before any authentication, with methods, headers and max-age', async () => {
    const res = await t.app.inject({
      method: 'OPTIONS',
      url: '/api/spendpolicy/decisions',
      headers: { origin: ORIGIN, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' },
    });
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
    expect(res.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(String(res.headers['access-control-allow-methods'])).toContain('POST');
    expect(String(res.headers['access-control-allow-methods'])).toContain('PUT');
    const allowed = String(res.headers['access-control-allow-headers']).split(/\s*,\s*/);
    expect(allowed).toEqual(expect.arrayContaining(['authorization', 'content-type', 'if-match']));
    expect(res.headers['access-control-max-age']).toBe('600');
  });

  it('a plain OPTIONS (no preflight headers) lists the methods its path answers, as a 405 does', async () => {
    const allowOf = async (url: string) => {
      const res = await t.app.inject({ method: 'OPTIONS', url });
      expect(res.statusCode).toBe(204);
      return res.headers.allow;
    };
    expect(await allowOf('/api/spendpolicy/evaluate')).toBe('POST, OPTIONS');
    expect(await allowOf('/healthz?x=1')).toBe('GET, HEAD, OPTIONS');
    expect(await allowOf('/api/spendpolicy/policies/sgp_x')).toBe('GET, HEAD, PUT, OPTIONS');
    const del = await t.app.inject({ method: 'DELETE', url: '/api/spendpolicy/policies/sgp_x' });
    expect(del.headers.allow).toBe('GET, HEAD, PUT, OPTIONS');
  });

  it('a plain OPTIONS of a path without routes is 404', async () => {
    expectProblem(await t.app.inject({ method: 'OPTIONS', url: '/nope' }), 404, 'route_not_found');
  });
});
