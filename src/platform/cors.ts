import type { FastifyInstance } from 'fastify';
import { AppError } from './errors.js';
import type { PathMethods } from './http.js';

/** Methods, request headers and response headers a browser client of the service needs. */
export const ALLOW_METHODS = 'GET, POST, PUT, OPTIONS';
const ALLOW_HEADERS = 'content-type, authorization, if-match, payment-signature, report-id, recovery-key';
const EXPOSE_HEADERS = 'payment-required, payment-response, retry-after, x-request-id, etag';
/** How long a browser may reuse a preflight answer (seconds). */
const PREFLIGHT_MAX_AGE = '600';

/**
 * CORS for browser clients (the reference x402 client runs in a page): any origin may call the
 * service, because it authenticates with bearer keys and payment signatures, never cookies.
 *
 * A request with an `Origin` gets its origin back with `Vary: Origin` and the exposed headers; a
 * preflight (OPTIONS with Access-Control-Request-Method) is answered 204 before any route or
 * authentication runs. A request without an `Origin` (servers, agents, curl) costs nothing but
 * one header lookup. This replaces @fastify/cors, which copied its whole options object on every
 * request and added three headers to every response: on the free evaluation that was measurable
 * (bench/experiments/ablation.ts, "lightcors").
 */
export function installCors(app: FastifyInstance, pathMethods: PathMethods): void {
  app.addHook('onRequest', (request, reply, done) => {
    const origin = request.headers.origin;
    if (origin === undefined) {
      // A cache must not hand this answer to a browser request with an Origin (HEAD answers with
      // the headers GET would).
      if (request.method === 'GET' || request.method === 'HEAD') reply.header('vary', 'Origin');
      done();
      return;
    }
    reply.header('access-control-allow-origin', origin);
    reply.header('vary', 'Origin');
    reply.header('access-control-expose-headers', EXPOSE_HEADERS);
    if (request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined) {
      reply
        .header('access-control-allow-methods', ALLOW_METHODS)
        .header('access-control-allow-headers', ALLOW_HEADERS)
        .header('access-control-max-age', PREFLIGHT_MAX_AGE)
        .header('content-length', '0')
        .code(204)
        .send();
      return;
    }
    done();
  });
  // OPTIONS without a preflight's headers: the methods the path answers (those of the whole
  // service for `OPTIONS *`), as a 405 names them; 404 for a path without routes.
  app.options('*', { schema: { hide: true } }, (request, reply) => {
    if (request.url === '*') return reply.header('allow', ALLOW_METHODS).code(204).send();
    const { path, allow } = pathMethods(request);
    if (allow === undefined) throw new AppError('route_not_found', `no route OPTIONS ${path}`);
    return reply.header('allow', allow).code(204).send();
  });
}
