import { isUtf8 } from 'node:buffer';
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import Ajv, { type Options, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify';
import { ALLOW_METHODS } from './cors.js';
import { isStorageFailure } from './db/failures.js';
import { AppError, PROBLEM_CONTENT_TYPE, problemBody } from './errors.js';
import { numberWithFraction, repeatsMemberName } from './json-members.js';
import { ADDRESS_FORMAT, ADDRESS_FORMAT_MESSAGE, checksumHolds } from './schemas.js';

export const BODY_LIMIT = 64 * 1024;
export const genReqId = () => randomUUID();

/**
 * Request bodies are validated strictly: no coercion ("5" never becomes 5 or the reverse), no
 * defaults, and additionalProperties:false rejects unknown fields instead of stripping them.
 * Query strings and path parameters arrive as text, so only they are coerced.
 */
const ajvBase: Options = { allErrors: true, removeAdditional: false, useDefaults: false, strict: false };
const strictAjv = addFormats.default(new Ajv.default({ ...ajvBase, coerceTypes: false }));
/** The same, stopping at the first error: for large bodies, whose every error would cost a lot to find (see bodyValidator). */
const firstErrorAjv = addFormats.default(new Ajv.default({ ...ajvBase, coerceTypes: false, allErrors: false }));
const lenientAjv = addFormats.default(new Ajv.default({ ...ajvBase, coerceTypes: true }));
for (const ajv of [strictAjv, firstErrorAjv, lenientAjv]) ajv.addFormat(ADDRESS_FORMAT, { type: 'string', validate: checksumHolds });

export function installValidators(app: FastifyInstance): void {
  app.setValidatorCompiler(({ schema, httpPart }) =>
    httpPart === 'body' ? wholeNumbersOnly(bodyValidator(schema as object)) : integersInDigits(schema as object, lenientAjv.compile(schema as object)),
  );
  // Bodies are JSON only. Fastify also parses text/plain by default, which turned a JSON body sent
  // as text/plain into a confusing "body: must be object" 400 instead of the 415 it is.
  app.removeContentTypeParser('text/plain');
  // An empty body labelled JSON is "no body" (a bare POST to approve), not malformed JSON; routes
  // that need a body then answer the usual validation 400. Fastify's own parser (with its
  // prototype-poisoning protection) handles everything else. The body is read as bytes: decoding
  // them as text would turn every invalid UTF-8 sequence into U+FFFD, so that different bytes
  // (two requestIds, two names) were stored as one string.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, raw, done) => {
    const bytes = raw as Buffer;
    const refused = refusedEncoding(request.headers);
    if (refused) done(refused, undefined);
    else if (bytes.length === 0) done(null, undefined);
    else if (!isUtf8(bytes)) done(new AppError('malformed_json', 'the body is not valid UTF-8; send JSON encoded as UTF-8'), undefined);
    else {
      const body = bytes.toString('utf8');
      parseJson(request, body, (err, value) => {
        if (err) done(err, undefined);
        else if (repeatsMemberName(body, value)) done(new AppError('malformed_json', 'an object in the body names a member twice; send each member once'), undefined);
        else {
          // Marked here, refused by the body's validator once the schema passed (so a 1.5 where a
          // string or an integer belongs is still named by its field).
          const number = numberWithFraction(body);
          if (number !== undefined && typeof value === 'object' && value !== null) fractionalNumbers.set(value, number);
          if (bytes.length > ALL_ERRORS_UP_TO_BYTES && typeof value === 'object' && value !== null) largeBodies.add(value);
          done(null, value);
        }
      });
    }
  });
}

const CHARSET_PARAMETER = /;\s*charset\s*=\s*"?([^";\s]*)/gi;

/**
 * A JSON body is read as UTF-8 without a content or transfer coding. A body labelled with another
 * charset, or compressed, would be read as something its sender did not write: 415, not a guess.
 */
function refusedEncoding(headers: FastifyRequest['headers']): AppError | undefined {
  // Every charset parameter counts: of `charset=utf-8; charset=utf-16` a proxy may have read either.
  const type = headers['content-type'] ?? '';
  const charsets = type.length > 16 ? [...type.matchAll(CHARSET_PARAMETER)].map((m) => m[1]!.toLowerCase()) : [];
  if (charsets.some((charset) => charset !== 'utf-8' && charset !== 'utf8')) {
    return new AppError('unsupported_media_type', 'send the body as application/json in UTF-8 (charset=utf-8, or no charset)');
  }
  const coding = headers['content-encoding']?.trim().toLowerCase();
  if (coding && coding !== 'identity') return new AppError('unsupported_media_type', 'send the body uncompressed: no Content-Encoding is accepted');
  // Node's parser decodes the chunked coding and passes any other (`gzip, chunked`) through as
  // if the body had none: a compressed body would then be read as malformed JSON.
  const transfer = headers['transfer-encoding'];
  if (transfer !== undefined && transfer.split(',').some((c) => c.trim().toLowerCase() !== 'chunked')) {
    return new AppError('unsupported_media_type', 'send the body with no transfer coding but chunked (Transfer-Encoding: chunked)');
  }
  return undefined;
}

/**
 * Bodies up to this size that fail validation are answered with every error (at most
 * MAX_LISTED_ERRORS listed); a larger one with its first. Finding every error of a 64 KiB array
 * of bad items cost 20 to 50 ms of CPU per request, for anyone to ask for; no valid body of this
 * service comes near 4 KiB but a policy's list of recipients.
 */
const ALL_ERRORS_UP_TO_BYTES = 4096;
const largeBodies = new WeakSet<object>();

/** A body validator: one that stops at the first error runs first; a small invalid body is then checked for all its errors. */
function bodyValidator(schema: object): ValidateFunction {
  const first = firstErrorAjv.compile(schema);
  const every = strictAjv.compile(schema);
  const validate = ((data: unknown, ...rest: unknown[]) => {
    if ((first as (...a: unknown[]) => boolean)(data, ...rest)) {
      validate.errors = null;
      return true;
    }
    const large = typeof data === 'object' && data !== null && largeBodies.has(data);
    if (!large) (every as (...a: unknown[]) => boolean)(data, ...rest);
    validate.errors = large ? first.errors : every.errors;
    return false;
  }) as ValidateFunction;
  validate.schemaEnv = every.schemaEnv;
  return validate;
}

/** Parsed bodies whose text wrote a number with a fraction or an exponent, with that number. */
const fractionalNumbers = new WeakMap<object, string>();

/**
 * Every number a request body of this service holds is a whole number (amounts are decimal
 * strings), and JSON.parse reads `0.99999999999999999`, `1e2` or `3.0` as integers without a
 * trace: 0.99999999999999999 repeats would count as 1, below a minimum of 1 would pass as 1. A
 * body whose text wrote such a number is refused once it has passed its schema.
 */
function wholeNumbersOnly(validate: ValidateFunction): ValidateFunction {
  const checked = ((data: unknown, ...rest: unknown[]) => {
    const ok = (validate as (...a: unknown[]) => boolean)(data, ...rest);
    checked.errors = validate.errors;
    const number = ok && typeof data === 'object' && data !== null ? fractionalNumbers.get(data) : undefined;
    if (number === undefined) return ok;
    checked.errors = [
      { instancePath: '', schemaPath: '', keyword: 'type', params: { type: 'integer' }, message: `holds the number ${number}: numbers are whole numbers in plain digits (amounts are decimal strings)` },
    ];
    return false;
  }) as ValidateFunction;
  checked.schemaEnv = validate.schemaEnv;
  return checked;
}

/**
 * Query strings and path parameters arrive as text and are coerced to the schema's types, and
 * ajv's coercion takes anything JavaScript reads as a number ("0x10", "1e1", " 10", "10.0"). An
 * integer member must be written in plain digits (no sign, no leading zero: "010" is not read
 * as 10 without a word): its text is checked before the coercion.
 */
function integersInDigits(schema: object, validate: ValidateFunction): ValidateFunction {
  const properties = (schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {};
  const integers = Object.keys(properties).filter((k) => properties[k]!.type === 'integer');
  if (integers.length === 0) return validate;
  const checked = ((data: Record<string, unknown> | null, ...rest: unknown[]) => {
    const text = integers.find((k) => typeof data?.[k] === 'string' && !/^(?:0|[1-9][0-9]*)$/.test(data[k] as string));
    if (text !== undefined) {
      checked.errors = [{ instancePath: `/${text}`, schemaPath: '', keyword: 'type', params: { type: 'integer' }, message: 'must be a whole number in plain digits (no sign, no leading zero)' }];
      return false;
    }
    const ok = (validate as (...a: unknown[]) => boolean)(data, ...rest);
    checked.errors = validate.errors;
    return ok;
  }) as ValidateFunction;
  checked.schemaEnv = validate.schemaEnv;
  return checked;
}

/** Validates a JSON value the way request bodies are validated; throws a 400 AppError naming `part`. */
export function compileBodyValidator(schema: object, part: string): (value: unknown) => void {
  const validate = strictAjv.compile(schema);
  return (value) => {
    if (validate(value)) return;
    const err = Object.assign(new Error('invalid'), { validation: validate.errors ?? [], validationContext: part });
    throw validationProblem(err as unknown as FastifyError);
  };
}

/** Most validation errors listed in a 400: a 64 KiB array of bad items would otherwise be 32,000 of them (megabytes). */
export const MAX_LISTED_ERRORS = 20;

function validationProblem(err: FastifyError): AppError {
  const part = err.validationContext ?? 'body';
  const all = err.validation ?? [];
  const errors = all.slice(0, MAX_LISTED_ERRORS).map((v) => {
    const missing = (v.params as { missingProperty?: string }).missingProperty;
    const extra = (v.params as { additionalProperty?: string }).additionalProperty;
    // An unknown member may be named "" (`{"": 1}`, `?=1`): still named in the path, as every other.
    const path = `${part}${v.instancePath}${missing !== undefined ? `/${missing}` : ''}${extra !== undefined ? `/${extra}` : ''}`;
    const checksum = v.keyword === 'format' && (v.params as { format?: string }).format === ADDRESS_FORMAT;
    const message = extra !== undefined ? 'unknown property is not allowed' : checksum ? ADDRESS_FORMAT_MESSAGE : (v.message ?? 'is invalid');
    return { path, message };
  });
  const first = errors[0];
  const more = all.length > errors.length ? ` (${all.length} problems in all; the first ${errors.length} are listed)` : '';
  return new AppError('invalid_request', first ? `${first.path}: ${first.message}${more}` : 'invalid request', { errors });
}

/** Maps anything thrown in a request to a problem body; unexpected errors become a bare 500. */
export function toAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  const e = err as FastifyError;
  if (e?.validation) return validationProblem(e);
  switch (e?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError('payload_too_large', `request bodies are limited to ${BODY_LIMIT} bytes`);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new AppError('unsupported_media_type', 'send the body as application/json');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new AppError('malformed_json', 'the JSON body is empty');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new AppError('malformed_json', 'the body is not valid JSON');
  }
  // A SyntaxError is the body's only when the body parser says so (statusCode 400): one thrown
  // while serving the request (BigInt of a malformed upstream answer) is no fault of the caller.
  if ((err instanceof SyntaxError && e.statusCode === 400) || e?.code === 'FST_ERR_CTP_INVALID_CONTENT_LENGTH') {
    return new AppError('malformed_json', 'the body is not valid JSON');
  }
  if (typeof e?.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return new AppError('invalid_request', 'the request could not be read');
  }
  if (isStorageFailure(err)) {
    return new AppError('storage_unavailable', 'the database is unavailable; retry later (a decision retried with the same requestId is never made twice; an approval retried after it took effect answers 409, already approved)');
  }
  return new AppError('internal_error', 'an unexpected error occurred; quote the requestId when reporting it');
}

/**
 * A route-level onSend hook for answers no cache may keep (paid reports with their receipts and
 * PAYMENT-RESPONSE, one-time recovery keys). It runs for every answer of the route, problem
 * answers of the error handler included, and has the last word over any Cache-Control set before
 * (the SDK's `private` on a settlement, say).
 */
export const noStore: onSendHookHandler = (_request, reply, payload, done) => {
  reply.header('cache-control', 'no-store');
  done(null, payload);
};

export function sendProblem(reply: FastifyReply, request: FastifyRequest, err: AppError): FastifyReply {
  for (const [k, v] of Object.entries(err.headers)) reply.header(k, v);
  if (err.retryAfter !== undefined) reply.header('retry-after', String(err.retryAfter));
  // RFC 9110 §15.5.2: a 401 names the scheme that would be accepted (every key here is a bearer key).
  if (err.status === 401 && !reply.hasHeader('www-authenticate')) reply.header('www-authenticate', 'Bearer realm="paywarden"');
  return reply.status(err.status).type(PROBLEM_CONTENT_TYPE).send(problemBody(err, request.id));
}

/**
 * Headers that hold one value, of which Node keeps the first and drops the others (or, for the
 * x402 and recovery headers, which it does not know, joins them with ", "): which one counted
 * would depend on their order (a key, the body's media type, the request's Host), and a proxy in
 * front may have read another. A joined PAYMENT-SIGNATURE read as a malformed payment (402), a
 * Recovery-Key sent twice as an incorrect key (404). The name of one sent more than once, or
 * undefined.
 */
export const SINGLE_HEADERS = ['Authorization', 'Content-Type', 'Host', 'PAYMENT-SIGNATURE', 'Report-Id', 'Recovery-Key'] as const;
/** Each one's lower-case name and its bit, by the name's length (a cheap first check: most headers are none of these). */
const SINGLE_BY_LENGTH = new Map<number, Array<[lower: string, bit: number, name: string]>>();
SINGLE_HEADERS.forEach((name, i) => {
  const lower = name.toLowerCase();
  SINGLE_BY_LENGTH.set(lower.length, [...(SINGLE_BY_LENGTH.get(lower.length) ?? []), [lower, 1 << i, name]]);
});

function repeatedSingleHeader(raw: string[]): string | undefined {
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const candidates = SINGLE_BY_LENGTH.get(name.length);
    if (candidates === undefined) continue;
    const lower = name.toLowerCase();
    for (const [single, bit, shown] of candidates) {
      if (lower !== single) continue;
      if (seen & bit) return shown;
      seen |= bit;
    }
  }
  return undefined;
}

/**
 * Node keeps the first 2000 header lines of a request and drops the rest without a word (its
 * default `maxHeadersCount`): a second Authorization, an If-Match (the PUT then replaced the
 * policy unconditionally), a Content-Encoding or an Expect after 2000 short lines was never seen.
 * With no count limit every line is kept; the 16 KiB limit on the header block still bounds them.
 */
export const MAX_HEADERS_COUNT = 0;

/** 5xx answers that say how this deployment is set up, not that something failed. */
const SET_UP_ANSWERS: ReadonlySet<string> = new Set(['direct_checks_disabled', 'payments_unavailable', 'shutting_down']);

/** Fastify options that go with installErrorHandling. */
export const HTTP_OPTIONS = {
  // A request that arrives during shutdown gets a problem body (installErrorHandling), not
  // Fastify's own 503 body.
  return503OnClosing: false,
  // A client may take this long to send its request; then 408. Without it a client that stalls
  // mid-body held the connection, and a shutdown, for ever.
  requestTimeout: 30_000,
  // A connection on which nothing has moved for this long (Node's inactivity timeout; twice that
  // when part of an answer was still taken in at the first expiry) is closed when its answer is
  // written and waits for a client that does not read it (see closeStalled). Without it such a
  // connection was held for ever, with its socket buffers (300 of them, both ends on loopback,
  // held 1.1 GB of kernel memory). Twice requestTimeout: a stalled request gets its 408 first.
  connectionTimeout: 60_000,
  http: {
    // The headers too, within the same 30 s (Node's default is 60 s), and the deadlines are
    // checked every second: Node's default check every 30 s made the 408 come up to 30 s late.
    headersTimeout: 30_000,
    connectionsCheckingInterval: 1_000,
    // An HTTP/1.1 request without Host is refused in installErrorHandling, with a problem body;
    // Node's own refusal is a bare 400 without one.
    requireHostHeader: false,
  },
} as const;

/** The scheme and authority of an absolute-form request target (RFC 9112 §3.2.2). */
const ABSOLUTE_FORM = /^[a-z][a-z0-9+.-]*:\/\/[^/]*/i;

/**
 * What a request's path answers: the path as the router read it (without the scheme and
 * authority of an absolute-form target, `DELETE http://host/healthz`, which it routes like
 * `/healthz`), and its Allow header, or undefined when no route has that path.
 */
export type PathMethods = (request: FastifyRequest) => { path: string; allow: string | undefined };

/** Installs the service's error handling; returns what each path answers (for OPTIONS). */
export function installErrorHandling(app: FastifyInstance): PathMethods {
  const methodsAt = routeMethods(app);
  const pathMethods: PathMethods = (request) => {
    const path = request.url.split('?')[0]!.replace(ABSOLUTE_FORM, '');
    const allowed = methodsAt(path);
    return { path, allow: allowed.length === 0 ? undefined : [...allowed, 'OPTIONS'].join(', ') };
  };
  // No route for this method: 405 with the methods the path has (RFC 9110 §15.5.6), or 404.
  const notFound = (request: FastifyRequest): AppError => {
    const { path, allow } = pathMethods(request);
    if (allow === undefined) return new AppError('route_not_found', `no route ${request.method} ${path}`);
    return new AppError('method_not_allowed', `${request.method} is not served at ${path}; it answers ${allow}`, { headers: { allow } });
  };
  let closing = false;
  /** The last request read on each connection: only its answer may end the connection. */
  const lastRequest = new WeakMap<object, object>();
  let sweep: NodeJS.Timeout | undefined;
  app.addHook('preClose', (done) => {
    closing = true;
    // close() ends the connections idle when it is called; one whose request was in flight then
    // becomes idle once answered, and was kept open until the shutdown deadline (45 s by default,
    // past a container's usual grace period). Shutting down, idle connections are closed every
    // 100 ms (a timer, not a hook: every request would pay for an onResponse hook).
    sweep = setInterval(() => app.server.closeIdleConnections(), 100).unref();
    done();
  });
  app.addHook('onClose', (_app, done) => {
    clearInterval(sweep);
    done();
  });
  // Shutting down, an answer to a request in progress says that its connection ends with it.
  // Said "keep-alive", the client sent its next request on that connection, which the sweep then
  // closed under it: a reset, after which the caller cannot know whether its decision or payment
  // was taken (it was not), instead of a new connection (to another instance, or refused). Only
  // the answer to the last request read on its connection says so: Node ends a connection with
  // an answer that says close, and a request pipelined behind it (being served, or turned away
  // with a 503) would never get its own.
  app.addHook('onSend', (request, reply, payload, done) => {
    if (closing && lastRequest.get(request.raw.socket) === request.raw) reply.header('connection', 'close');
    done(null, payload);
  });
  app.server.on('timeout', closeStalled);
  // A callback hook: an async one costs a promise and a microtask on every request.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    lastRequest.set(request.raw.socket, request.raw);
    // No protocol is upgraded to here, and Node's parser reads nothing more on a connection after a
    // request asking for one: a request pipelined behind it waited unanswered until the keep-alive
    // timeout. Such a connection ends with its answer instead.
    if (request.headers.upgrade !== undefined) reply.header('connection', 'close');
    const repeated = repeatedSingleHeader(request.raw.rawHeaders);
    if (repeated !== undefined) {
      sendProblem(reply, request, new AppError('invalid_request', `send one ${repeated} header, not several`));
      return;
    }
    // RFC 9112 §3.2: a server answers 400 to an HTTP/1.1 request without Host.
    if (request.headers.host === undefined && request.raw.httpVersion === '1.1') {
      sendProblem(reply, request, new AppError('invalid_request', 'send a Host header (HTTP/1.1 requires one)'));
      return;
    }
    if (!closing) return done();
    // Shutting down: a request on a connection still open is sent elsewhere, before any work.
    reply.header('connection', 'close');
    sendProblem(reply, request, new AppError('shutting_down', 'the service is shutting down; retry (another instance may answer)', { retryAfter: 1 }));
  });
  app.setErrorHandler((err, request, reply) => {
    let appErr = toAppError(err);
    // Fastify reads the body even for an unknown route; what the caller needs to hear is that the
    // route does not exist, not that its body was malformed, too large or of the wrong type.
    if (request.is404 && appErr.status < 500 && appErr.status !== 429) appErr = notFound(request);
    // Every 5xx is logged at error with its stack (a bug, a database, facilitator or RPC outage),
    // except the few that answer how this deployment is set up, which any caller can provoke:
    // those are warnings, so that they neither flood the error log nor hide an outage in it.
    if (appErr.status >= 500 && !SET_UP_ANSWERS.has(appErr.code)) request.log.error({ err }, 'request failed');
    else if (appErr.status >= 500) request.log.warn({ code: appErr.code }, appErr.message);
    else request.log.info({ code: appErr.code }, appErr.message);
    return sendProblem(reply, request, appErr);
  });
  app.setNotFoundHandler((request, reply) => sendProblem(reply, request, notFound(request)));
  return pathMethods;
}

/**
 * The methods that have a route at a path, from the routes as they are registered (a parameter
 * matches one path segment; a trailing slash is ignored, as the router does). OPTIONS, which
 * every path answers, and wildcard routes are left out.
 */
function routeMethods(app: FastifyInstance): (path: string) => string[] {
  const routes: Array<{ pattern: RegExp; methods: string[] }> = [];
  app.addHook('onRoute', (route) => {
    if (route.url.includes('*')) return;
    const segments = route.url.replace(/\/+$/, '').split('/').map((s) => (s.startsWith(':') ? '[^/]+' : s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
    routes.push({ pattern: new RegExp(`^${segments.join('/')}/?$`), methods: [route.method].flat().filter((m) => m !== 'OPTIONS') });
  });
  return (path) => [...new Set(routes.filter((r) => r.pattern.test(path)).flatMap((r) => r.methods))].sort();
}

/**
 * Requests Node's HTTP parser refuses before Fastify sees them (a malformed request line or
 * Content-Length, a control byte in a header, an unknown method, headers over 16 KiB, a request
 * not sent whole within HTTP_OPTIONS.requestTimeout) get a problem body like any other error,
 * instead of Fastify's default JSON, and the connection is closed (the parser cannot go on).
 */
export function clientError(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const appErr =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? new AppError('request_timeout', `send the whole request within ${HTTP_OPTIONS.requestTimeout / 1000} s`)
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? new AppError('headers_too_large', 'the request line and headers are limited to 16 KiB')
        : new AppError('invalid_request', `the request is not valid HTTP/1.1${err.code?.startsWith('HPE_') ? ` (${err.code})` : ''}`);
  // Once a connection's last answer is decided, what else arrives on it is not read any more.
  if (closingSockets.has(socket)) return;
  const requestId = genReqId();
  this.log.info({ reqId: requestId, code: appErr.code, reason: err.code }, appErr.message);
  lastAnswer(socket as HttpSocket, appErr, requestId);
}

/** Connections whose last answer waits for the answers before it (see lastAnswer). */
const closingSockets = new WeakSet<Duplex>();

/**
 * A CONNECT request (a proxy tunnel) is no route of this service; without this Node closes the
 * connection without a word.
 */
export function refuseConnect(this: FastifyInstance, _request: unknown, socket: Duplex): void {
  const err = new AppError('method_not_allowed', 'CONNECT is not supported: this is not a proxy', { headers: { allow: ALLOW_METHODS } });
  lastAnswer(socket as HttpSocket, err, genReqId());
}

/**
 * An `Expect` other than 100-continue: no expectation of this service can be met. Node answers a
 * bare 417 unless someone listens; this answers it with a problem body like every other error.
 * The request runs no route; what body it sends is read and discarded.
 */
export function refuseExpectation(this: FastifyInstance, request: IncomingMessage, response: ServerResponse): void {
  const requestId = genReqId();
  const err = new AppError('expectation_failed', 'the only expectation this service meets is "Expect: 100-continue"');
  this.log.info({ reqId: requestId, code: err.code }, err.message);
  const body = JSON.stringify(problemBody(err, requestId));
  response.writeHead(err.status, { 'content-type': PROBLEM_CONTENT_TYPE, 'content-length': Buffer.byteLength(body), 'x-request-id': requestId });
  response.end(body);
  request.resume();
}

/** A connection as Node's HTTP server keeps it: the answer under way on it, if any. */
type HttpSocket = Duplex & {
  _httpMessage?: (ServerResponse & { req?: IncomingMessage }) | null;
};

/**
 * A connection nothing has moved on for HTTP_OPTIONS.connectionTimeout (Node re-arms the timer
 * once when part of an answer was taken in meanwhile): closed when its answer is all written and
 * waits for the client to read it, or when it carries none (idle, as Node would). Left open while
 * its request is still arriving (requestTimeout's 408 answers that) or its answer is still being
 * made (a paid report may wait that long for the facilitator and the chain), which Node's own
 * handling, replaced by this listener, would cut off too.
 */
function closeStalled(socket: HttpSocket): void {
  const answer = socket._httpMessage;
  if (!answer || answer.writableEnded) socket.destroy();
}

/**
 * The last answer on a connection the parser gave up on: written after the answers of the
 * requests before it (HTTP/1.1 answers in order, and a client reads the first answer as its
 * first request's), then the connection is closed. A request that was fully read (pipelined
 * before the bad one) is answered first, however long it takes; an answer already being written
 * is not cut. The request the error cut off itself (its body incomplete, nothing answered yet)
 * gets this answer as its own.
 */
function lastAnswer(socket: HttpSocket, err: AppError, requestId: string): void {
  if (socket.destroyed) return;
  const pending = socket._httpMessage;
  if (pending && !pending.writableFinished && (pending.headersSent || pending.req?.complete)) {
    if (!closingSockets.has(socket)) {
      closingSockets.add(socket);
      socket.pause(); // nothing more is read from it: the parser gave up on it
    }
    pending.once('finish', () => setImmediate(() => lastAnswer(socket, err, requestId)));
    pending.once('close', () => pending.writableFinished || socket.destroy());
    return;
  }
  if (socket.writable) writeRawProblem(socket, err, requestId);
  socket.destroy();
}

function writeRawProblem(socket: Duplex, err: AppError, requestId: string): void {
  const body = JSON.stringify(problemBody(err, requestId));
  const headers = Object.entries(err.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  socket.write(
    `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status]}\r\ncontent-type: ${PROBLEM_CONTENT_TYPE}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `${headers}x-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/**
 * Errors Fastify raises before routing, where no hook or error handler runs: a URL whose
 * percent-encoding is invalid, and a path parameter over the router's length limit (no valid
 * identifier is that long). Both are the caller's mistake and get the usual problem body.
 */
export function frameworkError(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const detail =
    err.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'a path parameter is too long to be an identifier' : 'the URL is not valid (malformed percent-encoding, or an absolute URL that is not one)';
  reply.header('x-request-id', request.id);
  void sendProblem(reply, request, new AppError('invalid_request', detail));
}

