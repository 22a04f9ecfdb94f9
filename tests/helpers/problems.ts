import { expect } from 'vitest';

/** The parts of an inject() response the problem assertions read. */
export interface Res {
  statusCode: number;
  headers: Record<string, unknown>;
  body: string;
}

/**
 * Asserts that `res` is an RFC 9457 problem body of DESIGN.md section 3 with the given status
 * and code, and returns the parsed body.
 */
export function expectProblem(res: Res, status: number, code: string): any {
  expect(res.statusCode, res.body).toBe(status);
  expect(String(res.headers['content-type'])).toMatch(/^application\/problem\+json(;|$)/);
  const body = JSON.parse(res.body);
  expect(body).toMatchObject({ status, code });
  expect(typeof body.type).toBe('string');
  expect(body.type.length).toBeGreaterThan(0);
  expect(typeof body.title).toBe('string');
  expect(body.title.length).toBeGreaterThan(0);
  expect(typeof body.detail).toBe('string');
  expect(typeof body.requestId).toBe('string');
  expect(body.requestId.length).toBeGreaterThan(0);
  expect(res.headers['x-request-id']).toBe(body.requestId);
  // RFC 9110 §15.5.2: a 401 names the scheme it accepts.
  if (status === 401) expect(res.headers['www-authenticate']).toBe('Bearer realm="paywarden"');
  return body;
}

/** A 400 invalid_request whose errors[] names `path` (e.g. "body/policy/maxRepeats"). */
export function expectInvalid(res: Res, path?: string): any {
  const body = expectProblem(res, 400, 'invalid_request');
  expect(Array.isArray(body.errors)).toBe(true);
  expect(body.errors.length).toBeGreaterThan(0);
  for (const e of body.errors) {
    expect(typeof e.path).toBe('string');
    expect(typeof e.message).toBe('string');
  }
  if (path !== undefined) expect(body.errors.map((e: { path: string }) => e.path)).toContain(path);
  return body;
}
