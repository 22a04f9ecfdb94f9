import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loggerOptions } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { HTTP_OPTIONS, toAppError } from '../../src/platform/http.js';
import { createTestApp, createTestAppWith, type TestApp } from '../helpers/app.js';
import { createBody, createPolicy, POLICIES } from '../helpers/policies.js';

/** Sends raw bytes on a new connection and resolves with everything the server wrote before it closed. */
function raw(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    let got = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (got += chunk));
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    socket.setTimeout(5_000, () => socket.destroy(new Error(`no answer; got ${JSON.stringify(got)}`)));
  });
}

/** Status, headers (lower-case names) and parsed body of one raw HTTP/1.1 answer. */
function parse(answer: string) {
  const [head, body = ''] = answer.split('\r\n\r\n');
  const [statusLine, ...lines] = head!.split('\r\n');
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  return { status: Number(statusLine!.split(' ')[1]), headers, body: JSON.parse(body) as Record<string, unknown> };
}

function expectRawProblem(answer: string, status: number, code: string) {
  const r = parse(answer);
  expect(r.status, answer).toBe(status);
  expect(r.headers['content-type']).toBe('application/problem+json');
  expect(r.body).toMatchObject({ status, code, type: expect.stringContaining('/problems/'), title: expect.any(String), detail: expect.any(String) });
  expect(r.body.requestId).toMatch(/^[0-9a-f-]{36}$/);
  expect(r.headers['x-request-id']).toBe(r.body.requestId);
  return r;
}

/**
 * Requests refused by Node's HTTP parser, before any route, get the service's problem body like
 * every other error (not Fastify's default JSON), and CONNECT gets an answer instead of a
 * silently closed connection.
 */
describe('errors below the routes', () => {
  let t: TestApp;
  let port: number;
  beforeAll(async () => {
    t = await createTestApp();
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as { port: number }).port;
  });
  afterAll(() => t.close());

  it.each([
    ['a negative Content-Length', 'POST /api/spendpolicy/evaluate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: -1\r\n\r\n{}'],
    ['a control byte in a header', 'GET /api/services HTTP/1.1\r\nhost: x\r\nx-note: a\x01b\r\n\r\n'],
    ['an unknown method', 'FOO /healthz HTTP/1.1\r\nhost: x\r\n\r\n'],
    ['a garbage request line', 'hello there\r\n\r\n'],
  ])('%s: 400 invalid_request', async (_name, bytes) => {
    expectRawProblem(await raw(port, bytes), 400, 'invalid_request');
  });

  it('an HTTP/1.1 request without Host: 400 invalid_request with a problem body (Node\'s own is bare); HTTP/1.0 needs none', async () => {
    const r = parse(await raw(port, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n'));
    expect(r.status).toBe(400);
    expect(r.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(r.body).toMatchObject({ status: 400, code: 'invalid_request', detail: expect.stringMatching(/Host/), requestId: r.headers['x-request-id'] });
    expect(await raw(port, 'GET /healthz HTTP/1.0\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('an Expect other than 100-continue: 417 expectation_failed with a problem body, nothing run, the connection still usable', async () => {
    const body = JSON.stringify(createBody());
    const answer = await raw(
      port,
      `POST ${POLICIES} HTTP/1.1\r\nhost: x\r\nexpect: 200-ok\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}` +
        'GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n',
    );
    const [first, second] = answer.split(/(?=HTTP\/1\.1 )/);
    expectRawProblem(first!, 417, 'expectation_failed');
    expect(second).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).not.toContain('adminKey');
  });

  it('headers over 16 KiB: 431 headers_too_large', async () => {
    expectRawProblem(await raw(port, `GET /api/services HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`), 431, 'headers_too_large');
  });

  it('CONNECT: 405 method_not_allowed, with the Allow header a 405 must carry', async () => {
    const r = expectRawProblem(await raw(port, 'CONNECT 127.0.0.1:443 HTTP/1.1\r\nhost: 127.0.0.1:443\r\n\r\n'), 405, 'method_not_allowed');
    expect(r.headers.allow).toBe('GET, POST, PUT, OPTIONS');
  });

  // HTTP/1.1 answers in request order, and a client reads the first answer as its first
  // request's: an error answer must not overtake the answer of a valid request before it (which
  // ran: here a policy was created, whose keys would otherwise reach nobody).
  it.each([
    ['a malformed request', 'GET /healthz HTTP/1.1\r\nhost: x\r\nx-note: a\x01b\r\n\r\n', 400],
    ['a CONNECT', 'CONNECT 127.0.0.1:443 HTTP/1.1\r\nhost: 127.0.0.1:443\r\n\r\n', 405],
  ])('%s pipelined behind a valid request is answered after it', async (_name, second, status) => {
    const body = JSON.stringify(createBody());
    const first = `POST ${POLICIES} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const answer = await raw(port, first + second);
    const statuses = [...answer.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    expect(statuses).toEqual([201, status]);
    expect(answer).toContain('"adminKey"');
  });

  it('a request not sent whole in time: 408 request_timeout (the timeout itself is 30 s; raised here directly)', async () => {
    let written = '';
    const socket = { destroyed: false, writable: true, write: (s: string) => (written += s), destroy: () => undefined };
    t.app.server.emit('clientError', Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), socket);
    expect(expectRawProblem(written, 408, 'request_timeout').body.detail).toContain('30 s');
  });

  it('two Authorization headers: 400 whichever comes first (Node would keep only the first)', async () => {
    const p = await createPolicy(t);
    const get = (first: string, second: string) =>
      raw(port, `GET ${POLICIES}/${p.policyId} HTTP/1.1\r\nhost: x\r\nAuthorization: Bearer ${first}\r\nauthorization: Bearer ${second}\r\nconnection: close\r\n\r\n`);
    for (const [a, b] of [[p.adminKey, p.agentKey], [p.agentKey, p.adminKey], [p.adminKey, p.adminKey]]) {
      const r = parse(await get(a!, b!));
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ code: 'invalid_request', detail: expect.stringContaining('one Authorization header') });
    }
    const one = parse(await raw(port, `GET ${POLICIES}/${p.policyId} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${p.adminKey}\r\nconnection: close\r\n\r\n`));
    expect(one.status).toBe(200);
  });

  it.each([
    ['Content-Type', 'content-type: application/json\r\ncontent-type: text/plain'],
    ['Content-Type', 'content-type: text/plain\r\nContent-Type: application/json'],
    ['Host', 'host: y'],
  ])('two %s headers: 400 whichever comes first (Node would keep only the first)', async (name, extra) => {
    const body = '{"name":"x"}';
    const r = parse(await raw(port, `POST ${POLICIES} HTTP/1.1\r\nhost: x\r\n${extra.includes('content-type') || extra.includes('Content-Type') ? extra : `content-type: application/json\r\n${extra}`}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`));
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ code: 'invalid_request', detail: `send one ${name} header, not several` });
  });

  it.each(['gzip, chunked', 'foo, chunked'])('Transfer-Encoding: %s is a 415 (Node would read the body as if it had no such coding)', async (coding) => {
    const body = JSON.stringify(createBody());
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const send = (te: string) => raw(port, `POST ${POLICIES} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: ${te}\r\nconnection: close\r\n\r\n${chunked}`);
    const r = parse(await send(coding));
    expect(r.status).toBe(415);
    expect(r.body).toMatchObject({ code: 'unsupported_media_type', detail: expect.stringContaining('Transfer-Encoding: chunked') });
    expect(parse(await send('chunked')).status).toBe(201);
  });

  // Node keeps 2000 header lines by default and drops the others silently: what came after them
  // was never seen (a second key, an If-Match, a Content-Encoding, an Expect).
  describe('headers after 2000 other header lines are still read', () => {
    const filler = Array.from({ length: 2100 }, (_, i) => `x-f${i % 10}:\r\n`).join('');
    const expectCode = (answer: string, status: number, code: string) => expect(parse(answer).body).toMatchObject({ status, code });

    it('a second Authorization: 400', async () => {
      const p = await createPolicy(t);
      const r = parse(await raw(port, `GET ${POLICIES}/${p.policyId} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${p.adminKey}\r\n${filler}authorization: Bearer ${p.agentKey}\r\nconnection: close\r\n\r\n`));
      expect(r.status).toBe(400);
      expect(r.body).toMatchObject({ code: 'invalid_request', detail: 'send one Authorization header, not several' });
    });

    it('an If-Match that names another revision: 412, the policy unchanged', async () => {
      const p = await createPolicy(t);
      const body = JSON.stringify({ policy: createBody().policy });
      const put = (ifMatch: string) =>
        raw(port, `PUT ${POLICIES}/${p.policyId} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${p.adminKey}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${filler}if-match: ${ifMatch}\r\nconnection: close\r\n\r\n${body}`);
      expectCode(await put('"999"'), 412, 'precondition_failed');
      const r = await t.app.inject({ method: 'GET', url: `${POLICIES}/${p.policyId}`, headers: { authorization: `Bearer ${p.adminKey}` } });
      expect(r.json().revision).toBe(1);
      expect(parse(await put('"1"')).status).toBe(200);
    });

    it('a Content-Encoding: 415; an Expect: 417', async () => {
      const body = JSON.stringify(createBody());
      const post = (extra: string) => raw(port, `POST ${POLICIES} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${filler}${extra}\r\nconnection: close\r\n\r\n${body}`);
      expectCode(await post('content-encoding: gzip'), 415, 'unsupported_media_type');
      expectCode(await post('expect: 200-ok'), 417, 'expectation_failed');
    });
  });

  // Node joins the values of headers it does not know with ", ": a doubled PAYMENT-SIGNATURE read
  // as a malformed payment (402), a doubled Recovery-Key as an incorrect key (404).
  it.each(['PAYMENT-SIGNATURE', 'Report-Id', 'Recovery-Key'])('two %s headers: 400 whichever they hold', async (name) => {
    const r = parse(await raw(port, `GET /api/quick-check HTTP/1.1\r\nhost: x\r\n${name}: a\r\n${name.toLowerCase()}: a\r\nconnection: close\r\n\r\n`));
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ code: 'invalid_request', detail: `send one ${name} header, not several` });
  });

  it('an unknown member or query parameter named "": named in the path like any other', async () => {
    const body = JSON.stringify({ '': 1, ...createBody() });
    const r = parse(await raw(port, `POST ${POLICIES} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`));
    expect(r.body).toMatchObject({ status: 400, detail: 'body/: unknown property is not allowed', errors: [{ path: 'body/', message: 'unknown property is not allowed' }] });
  });

  it('a request pipelined behind one asking for an Upgrade: the connection closes after the first answer, not at the keep-alive timeout', async () => {
    const answer = await raw(port, 'GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n\r\nGET /readyz HTTP/1.1\r\nhost: x\r\n\r\n');
    const r = parse(answer);
    expect(r.status).toBe(200);
    expect(r.headers.connection).toBe('close');
  });

  it('an absolute-form target is routed, and refused, like its path', async () => {
    const send = (target: string) => raw(port, `${target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
    expect(parse(await send('GET http://x/healthz')).status).toBe(200);
    const wrongMethod = parse(await send('DELETE http://x/healthz'));
    expect(wrongMethod.headers.allow).toBe('GET, HEAD, OPTIONS');
    expect(wrongMethod.body).toMatchObject({ status: 405, code: 'method_not_allowed', detail: 'DELETE is not served at /healthz; it answers GET, HEAD, OPTIONS' });
    expect(parse(await send('GET http://x/nope')).body).toMatchObject({ status: 404, code: 'route_not_found', detail: 'no route GET /nope' });
  });

  it('HEAD answers with the Vary of GET', async () => {
    const head = parse(await raw(port, 'HEAD /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n').then((a) => `${a}{}`));
    expect(head.headers.vary).toBe('Origin');
  });

  it('the service goes on answering on other connections', async () => {
    const r = parse(await raw(port, 'GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'));
    expect(r.status).toBe(200);
  });
});

describe('garbage pipelined behind a slow request', () => {
  let t: TestApp;
  let port: number;
  let release: () => void = () => {};
  let slowReply: import('node:http').ServerResponse | undefined;
  const logged: string[] = [];
  beforeAll(async () => {
    const stream = new (await import('node:stream')).PassThrough();
    stream.on('data', (c: Buffer) => logged.push(...c.toString('utf8').split('\n').filter(Boolean)));
    t = await createTestAppWith(
      (app) =>
        void app.get('/slow', async (_request, reply) => {
          slowReply = reply.raw;
          await new Promise<void>((r) => (release = r));
          return { ok: true };
        }),
      { logger: loggerOptions(testConfig({ logLevel: 'info' }), stream) },
    );
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as { port: number }).port;
  });
  afterAll(async () => {
    release();
    await t.close();
  });

  it('is read no further once the parser gave up: one error logged, no listeners piling up, answers in order', async () => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (got += d));
    const closed = new Promise<void>((r) => socket.on('close', () => r()));
    await new Promise((r) => socket.once('connect', r));
    socket.write('GET /slow HTTP/1.1\r\nhost: x\r\n\r\n');
    while (!slowReply) await new Promise((r) => setTimeout(r, 10));
    socket.write('BOGUS\x01 / HTTP/1.1\r\n');
    for (let i = 0; i < 100; i++) {
      socket.write(`garbage line ${i} \x01\r\n`);
      await new Promise((r) => setImmediate(r));
    }
    await new Promise((r) => setTimeout(r, 100));
    expect(slowReply.listenerCount('finish')).toBeLessThanOrEqual(3);
    release();
    await closed;
    expect([...got.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]))).toEqual([200, 400]);
    expect(logged.filter((l) => l.includes('not valid HTTP/1.1'))).toHaveLength(1);
  });
});

/**
 * A client that sends requests and never reads the answers held its connection, and the answers'
 * buffers, for as long as it liked: nothing timed out once an answer was under way. Such a
 * connection is closed after HTTP_OPTIONS.connectionTimeout without progress (shortened here);
 * one whose request is still arriving (the 408's) or whose answer is still being made is not.
 */
describe('a client that does not read its answers', () => {
  let t: TestApp;
  let port: number;
  let release = () => {};
  const clients: Socket[] = [];
  beforeAll(async () => {
    t = await createTestAppWith(
      (app) =>
        void app.get('/slow', async () => {
          await new Promise<void>((r) => (release = r));
          return { ok: true };
        }),
    );
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    port = (t.app.server.address() as { port: number }).port;
  });
  afterAll(async () => {
    release();
    for (const c of clients) c.destroy();
    await t.close();
  });

  /** A connection that sends `bytes`; resolves once the server has accepted it, with its server end and what it received. */
  const open = (bytes: string) =>
    new Promise<{ client: Socket; server: Socket; received: () => string }>((resolve) => {
      let got = '';
      const client = connect(port, '127.0.0.1');
      clients.push(client);
      client.setEncoding('latin1');
      client.on('data', (d: string) => (got += d));
      client.on('error', () => {});
      t.app.server.once('connection', (server: Socket) => {
        client.write(bytes);
        resolve({ client, server, received: () => got });
      });
    });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it('closes the connection once its answers stop moving; not while a request arrives or an answer is made', async () => {
    expect(t.app.server.timeout).toBe(HTTP_OPTIONS.connectionTimeout);
    t.app.server.setTimeout(300); // for the connections accepted from here on
    // Forty OpenAPI documents (312 KB each) are more than the socket buffers between them hold.
    const stalled = await open('GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n'.repeat(40));
    stalled.client.pause();
    const slow = await open('GET /slow HTTP/1.1\r\nhost: x\r\n\r\n');
    const arriving = await open('POST /api/spendpolicy/evaluate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"agentId"');
    for (let i = 0; i < 50 && !stalled.server.destroyed; i++) await sleep(100);
    expect(stalled.server.destroyed).toBe(true);
    await sleep(500);
    expect(slow.server.destroyed).toBe(false);
    expect(arriving.server.destroyed).toBe(false);
    release();
    for (let i = 0; i < 50 && !slow.received().includes('{"ok":true}'); i++) await sleep(20);
    expect(slow.received()).toMatch(/^HTTP\/1\.1 200 /);
  });
});

/**
 * A 400 names what is wrong without growing with the body: 64 KiB of bad array items were 32,000
 * errors (a 2.4 MB answer, and 20 to 50 ms of CPU to find them all), for anyone to ask for.
 */
describe('validation errors of a body', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp();
  });
  afterAll(() => t.close());
  const post = (url: string, payload: string) => t.app.inject({ method: 'POST', url, payload, headers: { 'content-type': 'application/json' } });

  it.each(['/api/spendpolicy/policies', '/api/spendpolicy/evaluate'])('%s, 64 KiB of bad items: a small 400 naming the first problem', async (url) => {
    const body = `{"policy":{"allowedRecipients":[${'0,'.repeat(32_500).slice(0, -1)}]}}`;
    const res = await post(url, body);
    expect(res.statusCode).toBe(400);
    expect(res.json().errors).toHaveLength(1);
    expect(res.body.length).toBeLessThan(1000);
  });

  it('a small body: every problem found, at most 20 listed, and the detail says how many there are', async () => {
    const small = await post('/api/spendpolicy/policies', JSON.stringify({ ...createBody(), name: 7, agentId: 8 }));
    expect(small.json().errors.map((e: { path: string }) => e.path)).toEqual(['body/name', 'body/agentId']);
    const body = JSON.stringify({ ...createBody(), ...Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`extra${i}`, 1])) });
    expect(body.length).toBeLessThan(4096);
    const many = await post('/api/spendpolicy/policies', body);
    expect(many.json().errors).toHaveLength(20);
    expect(many.json().detail).toMatch(/\(30 problems in all; the first 20 are listed\)$/);
  });
});

/**
 * A shutdown that begins while two pipelined requests of one connection are being served: the
 * first answer must not say Connection: close, or Node ends the connection with it and the second
 * request, served all the same (a decision taken, a payment settled), is never answered.
 */
describe('pipelined requests in progress when a shutdown begins', () => {
  it('answers both, the last with Connection: close', async () => {
    let entered = 0;
    let release = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const t = await createTestAppWith(
      (app) =>
        void app.get('/slow/:n', async (request) => {
          entered++;
          await gate;
          return { n: (request.params as { n: string }).n };
        }),
    );
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    const port = (t.app.server.address() as { port: number }).port;
    const received = raw(port, 'GET /slow/1 HTTP/1.1\r\nhost: x\r\n\r\nGET /slow/2 HTTP/1.1\r\nhost: x\r\n\r\n');
    for (let i = 0; i < 100 && entered < 2; i++) await new Promise((r) => setTimeout(r, 10));
    expect(entered).toBe(2);
    const closing = t.close();
    await new Promise((r) => setTimeout(r, 50));
    release();
    const answers = (await received).split(/(?=HTTP\/1\.1 )/).map(parse);
    await closing;
    expect(answers.map((a) => [a.status, a.body.n, a.headers.connection])).toEqual([
      [200, '1', 'keep-alive'],
      [200, '2', 'close'],
    ]);
  });
});

describe('errors raised inside the service', () => {
  it('a Fastify error with status 500 (a reply that could not be serialized, say) is a 500, not the caller\'s mistake', () => {
    const serialization = Object.assign(new Error('"id" is required!'), { statusCode: 500, code: 'FST_ERR_FAILED_ERROR_SERIALIZATION' });
    expect(toAppError(serialization)).toMatchObject({ status: 500, code: 'internal_error' });
    const clientSide = Object.assign(new Error('Body cannot be empty'), { statusCode: 400, code: 'FST_ERR_SOMETHING' });
    expect(toAppError(clientSide)).toMatchObject({ status: 400, code: 'invalid_request' });
  });
});
