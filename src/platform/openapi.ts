import type { SwaggerOptions } from '@fastify/swagger';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { ERROR_CODES, type ErrorCode } from './errors.js';
import { SINGLE_HEADERS } from './http.js';
import { NETWORK, USDC_ADDRESS } from './prices.js';
import { Problem, problems } from './schemas.js';

export const API_VERSION = '1.5.0-rc.1';

/** The OpenAPI document is generated from the route schemas; this adds what routes cannot say. */
export function openApiOptions(config: Config): SwaggerOptions {
  return {
    transformObject: (document) => ('openapiObject' in document ? withWhatEveryResponseSays(document.openapiObject as Document) : document.swaggerObject) as object,
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Paywarden: Base USDC payment-safety and spend-policy service',
        version: API_VERSION,
        description: [
          'Free advisory tools, protected spend policies kept outside the agent, paid safety reports over x402, and tamper-evident evidence chains for USDC on Base.',
          'The service never holds keys, never signs, never executes and never authorizes a payment: executionAuthorized is always false, and no paid check is invoked or charged automatically.',
          '',
          '**Errors** are RFC 9457 problem bodies (`application/problem+json`) with a stable `code` and the `requestId`; every 429 carries `Retry-After`. A path asked with a method it does not answer is 405 with `Allow`; an unknown path is 404. Every GET also answers HEAD (its headers, no body), and every path answers OPTIONS with 204 and the `Allow` of its methods (a CORS preflight, on any path, gets the `Access-Control-*` headers; a plain OPTIONS of an unknown path is 404).',
          '',
          `Any request may be refused before its route runs, with a problem body: 400 \`invalid_request\` when ${ONE_VALUE_HEADERS} is sent more than once, an HTTP/1.1 request has no Host, the URL has malformed percent-encoding, or the request is not valid HTTP/1.1; 408 \`request_timeout\` when it is not sent whole within 30 s; 417 \`expectation_failed\` for an \`Expect\` other than 100-continue; 431 \`headers_too_large\` over 16 KiB of request line and headers.`,
          '',
          `**Payment (x402 v2).** Paid reports answer a request without a \`PAYMENT-SIGNATURE\` header with 402 and a \`PAYMENT-REQUIRED\` header (base64 JSON: x402Version 2, scheme exact, network ${NETWORK}, asset USDC ${USDC_ADDRESS}, the report's price). An x402 v2 client authorizes that amount and retries the same request with \`PAYMENT-SIGNATURE\`; a 200 carries the report and \`PAYMENT-RESPONSE\`. A 402 never charges; its body is a problem body like every other error (code \`payment_required\`, or \`payment_invalid\` with the reason when a payment was not accepted), and x402 clients read the challenge from the header. Input is validated before any payment is asked for.`,
        ].join('\n'),
      },
      servers: [{ url: config.publicBaseUrl }],
      tags: [
        { name: 'catalogue', description: 'Service catalogue and documents' },
        { name: 'spend-policy', description: 'Free evaluation and protected spend policies' },
        { name: 'leads', description: 'Company pilot requests' },
        { name: 'health', description: 'Liveness and readiness' },
        { name: 'tokens', description: 'Free token market preview and evidence coverage' },
        { name: 'paid reports', description: 'Reports paid per delivery over x402, and their recovery orders' },
        { name: 'evidence-chains', description: 'Tamper-evident evidence of a payment: intent, decision, preflight and settlement' },
      ],
      components: {
        securitySchemes: {
          adminKey: {
            type: 'http',
            scheme: 'bearer',
            description: 'The policy admin key (sgp_admin_…), shown once at policy creation',
          },
          agentKey: {
            type: 'http',
            scheme: 'bearer',
            description: 'The policy agent key (sgp_agent_…), shown once at policy creation',
          },
          x402: {
            type: 'apiKey',
            in: 'header',
            name: 'PAYMENT-SIGNATURE',
            description: 'x402 v2 payment authorization answering the PAYMENT-REQUIRED challenge of a 402',
          },
        },
      },
    },
  };
}

/**
 * Marks a route whose body may be left out: put `[OPTIONAL_BODY]: true` in the route schema.
 * @fastify/swagger marks every body required; installOptionalBodies makes the route accept none.
 */
export const OPTIONAL_BODY = 'x-optional-body';

/**
 * For every route marked OPTIONAL_BODY registered after this: no body is validated as `{}`; a
 * body that is there (JSON null included) must be the object the schema describes, unknown
 * members refused.
 */
export function installOptionalBodies(app: FastifyInstance): void {
  const absentBodyIsEmpty = async (request: FastifyRequest): Promise<void> => {
    if (request.body === undefined) request.body = {};
  };
  app.addHook('onRoute', (route) => {
    if (!(route.schema as Record<string, unknown> | undefined)?.[OPTIONAL_BODY]) return;
    const own = route.preValidation === undefined ? [] : Array.isArray(route.preValidation) ? route.preValidation : [route.preValidation];
    route.preValidation = [absentBodyIsEmpty, ...own];
  });
}

type Header = { description?: string; required?: boolean; schema: object };
type Response = { description: string; headers?: Record<string, Header>; content?: Record<string, { schema?: object }> };
type Operation = { responses?: Record<string, Response>; requestBody?: { required?: boolean }; security?: Array<Record<string, string[]>>; [OPTIONAL_BODY]?: boolean };
type Document = { paths?: Record<string, Record<string, Operation | unknown>>; components?: { schemas?: Record<string, object> } };

/**
 * What @fastify/swagger cannot take from a route's schema: a body marked optional
 * (OPTIONAL_BODY); a 400 that any request may meet before its route runs (refusedBeforeRouting);
 * a 503 that any request may meet (the service shutting down, its storage
 * failing: installErrorHandling, toAppError); and what holds for every response: each carries
 * x-request-id (installErrorHandling); every error is a problem body sent as
 * application/problem+json (sendProblem), where the generator writes application/json; a 402
 * or 412 always carries PAYMENT-REQUIRED, a 401 WWW-Authenticate, and a 503 for a shutdown or
 * a storage failure Retry-After.
 */
function withWhatEveryResponseSays(doc: Document): Document {
  for (const operations of Object.values(doc.paths ?? {})) {
    for (const operation of Object.values(operations) as (Operation | undefined)[]) {
      // An operation that names no security scheme takes no key: say so, rather than leave
      // linters and generators to guess whether a root-level requirement was forgotten.
      if (operation?.responses) operation.security ??= [];
      if (operation?.[OPTIONAL_BODY]) {
        delete operation[OPTIONAL_BODY];
        if (operation.requestBody) operation.requestBody.required = false;
      }
      if (operation?.responses && !operation.responses['400']) {
        // In status order, as the generator writes them.
        operation.responses = Object.fromEntries(Object.entries({ ...operation.responses, 400: refusedBeforeRouting() }).sort(([a], [b]) => a.localeCompare(b)));
      }
      const responses = operation?.responses;
      if (responses && !responses['503']) responses['503'] = problemResponse(503);
      for (const [status, response] of Object.entries(responses ?? {})) {
        // The generator's placeholder for a response schema without a description.
        if (response.description === 'Default Response') response.description = STATUS_TEXT[status] ?? `HTTP ${status}`;
        response.headers = { 'x-request-id': REQUEST_ID_HEADER, ...response.headers };
        const json = response.content?.['application/json'];
        if (Number(status) >= 400 && json) response.content = { 'application/problem+json': isProblem(json.schema) ? { schema: { $ref: PROBLEM_REF } } : json };
        const challenge = response.headers['PAYMENT-REQUIRED'];
        if (challenge && (status === '402' || status === '412')) challenge.required = true;
        if (status === '401') response.headers['WWW-Authenticate'] ??= BEARER_CHALLENGE_HEADER;
        if (status === '503') response.headers['Retry-After'] ??= SHUTDOWN_RETRY_HEADER;
      }
    }
  }
  doc.components = { ...doc.components, schemas: { ...doc.components?.schemas, Problem: structuredClone(Problem) } };
  return doc;
}

/**
 * Every problem body is one named schema, components.schemas.Problem: inline, each of the 150-odd
 * error responses had its own copy, which generators turned into as many types (orval:
 * PostApiSpendpolicyDecisions409, ...). What each status means stays in the response's
 * description. A schema is a problem body when it has exactly Problem's members.
 */
const PROBLEM_REF = '#/components/schemas/Problem';
const PROBLEM_SHAPE = JSON.stringify({ properties: Problem.properties, required: Problem.required });
function isProblem(schema: unknown): boolean {
  const s = schema as { type?: string; properties?: unknown; required?: unknown } | undefined;
  return s?.type === 'object' && JSON.stringify({ properties: s.properties, required: s.required }) === PROBLEM_SHAPE;
}

/**
 * The 400 any request may meet before its route runs, for an operation whose own schema has none:
 * a header that holds one value sent twice, an HTTP/1.1 request without Host
 * (installErrorHandling), a URL with malformed percent-encoding (frameworkError).
 */
function refusedBeforeRouting(): Response {
  return problemResponse(400, {
    code: 'invalid_request',
    why: `${ONE_VALUE_HEADERS} sent more than once, an HTTP/1.1 request without Host, or a URL with malformed percent-encoding`,
  });
}

/**
 * A problem response as the generator writes problems(status) (a fresh copy each time); with
 * `only`, one that can be that code alone, for the reason given.
 */
function problemResponse(status: number, only?: { code: ErrorCode; why: string }): Response {
  const schema = structuredClone(problems(status)[status]) as { description: string };
  if (only) schema.description = ERROR_CODES[only.code].title;
  const description = only ? `${schema.description} (${only.code}): ${only.why}` : schema.description;
  return { description, content: { 'application/json': { schema } } };
}

/** The headers refused when sent twice (installErrorHandling), as the document names them. */
const ONE_VALUE_HEADERS = `a header that holds one value (${SINGLE_HEADERS.join(', ')})`;

const STATUS_TEXT: Record<string, string> = { '200': 'OK', '201': 'Created', '202': 'Accepted: not complete yet; ask again after Retry-After' };

/** Every 401 (sendProblem). */
const BEARER_CHALLENGE_HEADER: Header = { description: 'Bearer realm="paywarden": send the key as Authorization: Bearer <key>', required: true, schema: { type: 'string' } };
/** A 503 shutting_down or storage_unavailable says when to retry. */
const SHUTDOWN_RETRY_HEADER: Header = { description: 'Seconds to wait before retrying; sent with shutting_down and storage_unavailable', schema: { type: 'integer' } };

const REQUEST_ID_HEADER: Header = {
  description: 'The id of this request, also in every problem body (requestId) and log line; quote it when reporting a problem',
  required: true,
  schema: { type: 'string' },
};
