/**
 * Ablation copy of the service for profiling (experiments only; never edits src/). It rebuilds
 * what buildApp() does for POST /api/spendpolicy/evaluate from the same src/ pieces, and
 * BENCH_VARIANT (comma-separated flags) switches one thing off or changes it:
 *
 *   nologger     logger:false instead of pino at level silent (no per-request child logger)
 *   nocors       no CORS hook (src/platform/cors.ts)
 *   noswagger    no @fastify/swagger
 *   defaultid    Fastify's counter request ids instead of randomUUID
 *   synchook     the x-request-id onRequest hook as a callback hook instead of an async one
 *   noreqidhook  no x-request-id hook at all
 *   nolimiter    no rate-limit onRequest hook on the route (rate limits are off anyway)
 *   noresponse   no response schema (JSON.stringify instead of fast-json-stringify)
 *   firsterror   ajv allErrors:false for bodies
 *   fixedtime    evaluatedAt a constant string (what new Date().toISOString() costs)
 *   norules      skip parseUsdc/evaluatePolicy (constant APPROVE) to see what the rules cost
 *   defaultjson  Fastify's own JSON body parser instead of the service's wrapper around it
 *   lightcors    instead of installCors (which replaced @fastify/cors), one callback onRequest hook that adds the CORS
 *                headers only when the request has an Origin (preflights not handled: cost only)
 *   fastmoney    a parseUsdc that computes amounts below 10^9 USDC with exact Number arithmetic
 *   noredact     pino without the redact paths (the service's logs never serialize headers anyway)
 *   norequestlog Fastify's disableRequestLogging: no "incoming request"/"request completed" lines
 *                (the logger and its per-request child stay)
 *
 * Only the evaluate route is registered: the other feature plugins are encapsulated and add no
 * hook that runs for it. With no flag it must cost what the real target costs (check that first).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Ajv, { type Options } from 'ajv';
import addFormats from 'ajv-formats';
import Fastify, { type FastifyInstance } from 'fastify';
import type { AppDeps } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { evaluatePolicy } from '../../src/features/spend-policy/rules.js';
import { EvaluateRequest, EvaluateResponse } from '../../src/features/spend-policy/schemas.js';
import { installCors } from '../../src/platform/cors.js';
import { openInfrastructure } from '../../src/platform/deps.js';
import { BODY_LIMIT, genReqId, installErrorHandling, installValidators as installServiceValidators, sendProblem, toAppError, type PathMethods } from '../../src/platform/http.js';
import { AppError } from '../../src/platform/errors.js';
import { AMOUNT_PATTERN, parseUsdc } from '../../src/platform/money.js';
import { openApiOptions } from '../../src/platform/openapi.js';
import { NETWORK, PAID_REPORTS } from '../../src/platform/prices.js';
import { problems } from '../../src/platform/schemas.js';
import { EVALUATE_BODY } from '../targets/evaluate.js';
import { injectWith, type RunningTarget, type TargetModule } from '../lib/types.js';

export const VARIANT_FLAGS = ['nologger', 'nocors', 'noswagger', 'defaultid', 'synchook', 'noreqidhook', 'nolimiter', 'noresponse', 'firsterror', 'fixedtime', 'norules', 'defaultjson', 'lightcors', 'fastmoney', 'norequestlog', 'noredact'] as const;

export function parseFlags(text: string): Set<string> {
  const flags = new Set(text.split(',').map((s) => s.trim()).filter(Boolean));
  for (const f of flags) if (!(VARIANT_FLAGS as readonly string[]).includes(f)) throw new Error(`unknown variant flag ${f}`);
  return flags;
}

const optionalChecks = (['transactionPreflight', 'tokenRisk'] as const).map((name) => ({
  check: name === 'tokenRisk' ? 'token-risk' : 'transaction-preflight',
  method: PAID_REPORTS[name].method,
  endpoint: PAID_REPORTS[name].path,
  price: PAID_REPORTS[name].price,
  asset: 'USDC' as const,
  network: NETWORK,
  invoked: false as const,
  charged: false as const,
}));

const AMOUNT_RE = new RegExp(AMOUNT_PATTERN);
const SCALE = 1_000_000n;
/** Same results as parseUsdc; below 10^9 USDC whole*10^6+frac < 2^53, so Number math is exact. */
function parseUsdcFast(s: string): bigint {
  if (typeof s !== 'string' || !AMOUNT_RE.test(s)) throw new RangeError('not a USDC amount');
  const dot = s.indexOf('.');
  const whole = dot < 0 ? s : s.slice(0, dot);
  const frac = dot < 0 ? '' : s.slice(dot + 1);
  if (whole.length <= 9) return BigInt(Number(whole) * 1_000_000 + (frac ? Number(frac.padEnd(6, '0')) : 0));
  return BigInt(whole) * SCALE + BigInt(frac.padEnd(6, '0'));
}

const EXPOSE = ['payment-required', 'payment-response', 'retry-after', 'x-request-id', 'etag'].join(', ');

/** The service's installValidators, or a copy of it with the flags' changes. */
function installValidators(app: FastifyInstance, on: (f: string) => boolean): void {
  if (!on('firsterror') && !on('defaultjson')) return installServiceValidators(app);
  const base: Options = { allErrors: !on('firsterror'), removeAdditional: false, useDefaults: false, strict: false };
  const strict = addFormats.default(new Ajv.default({ ...base, coerceTypes: false }));
  const lenient = addFormats.default(new Ajv.default({ ...base, coerceTypes: true }));
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? strict : lenient).compile(schema as object));
  app.removeContentTypeParser('text/plain');
  if (!on('defaultjson')) {
    const parseJson = app.getDefaultJsonParser('error', 'error');
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
      if (body === '') done(null, undefined);
      else parseJson(request, body as string, done);
    });
  }
}

/** The evaluate route as buildApp serves it, with the flags' changes; `deps` from openInfrastructure. */
export async function buildVariant(flags: ReadonlySet<string>, deps: AppDeps): Promise<FastifyInstance> {
  const on = (f: string) => flags.has(f);
  const parse = on('fastmoney') ? parseUsdcFast : parseUsdc;
  const app = Fastify({
    logger: on('nologger')
      ? false
      : {
          level: process.env.BENCH_LOG_LEVEL ?? deps.config.logLevel,
          ...(on('noredact') ? {} : { redact: ['req.headers.authorization', 'req.headers["payment-signature"]', 'req.headers["recovery-key"]'] }),
        },
    ...(on('defaultid') ? {} : { genReqId }),
    ...(on('norequestlog') ? { disableRequestLogging: true } : {}),
    bodyLimit: BODY_LIMIT,
    trustProxy: false,
    routerOptions: { ignoreTrailingSlash: true },
  }).withTypeProvider<TypeBoxTypeProvider>();

  installValidators(app, on);
  let pathMethods: PathMethods = () => ({ path: '', allow: undefined });
  if (on('synchook') || on('noreqidhook')) {
    // installErrorHandling adds the async x-request-id hook; rebuild its other parts here.
    if (on('synchook')) {
      app.addHook('onRequest', (request, reply, done) => {
        reply.header('x-request-id', request.id);
        done();
      });
    }
    app.setErrorHandler((err, request, reply) => sendProblem(reply, request, toAppError(err)));
    app.setNotFoundHandler((request, reply) => sendProblem(reply, request, new AppError('route_not_found', 'no route')));
  } else {
    pathMethods = installErrorHandling(app);
  }
  if (on('lightcors')) {
    app.addHook('onRequest', (request, reply, done) => {
      const origin = request.headers.origin;
      if (origin) reply.header('access-control-allow-origin', origin).header('vary', 'Origin').header('access-control-expose-headers', EXPOSE);
      done();
    });
  } else if (!on('nocors')) {
    installCors(app, pathMethods);
  }
  if (!on('noswagger')) await app.register(swagger, openApiOptions(deps.config));

  const fixedTime = new Date().toISOString();
  app.post(
    '/api/spendpolicy/evaluate',
    {
      ...(on('nolimiter') ? {} : { onRequest: deps.limiter.hook('evaluate') }),
      schema: {
        body: EvaluateRequest,
        ...(on('noresponse') ? {} : { response: { 200: EvaluateResponse, ...problems(400, 413, 415, 429) } }),
      },
    },
    async (request) => {
      const { body } = request;
      const { decision, reasons } = on('norules')
        ? { decision: 'APPROVE' as const, reasons: [] }
        : evaluatePolicy(
            {
              maxPerTransaction: parse(body.policy.maxPerTransaction),
              requireHumanAbove: parse(body.policy.requireHumanAbove),
              maxRepeats: body.policy.maxRepeats,
              allowedRecipients: body.policy.allowedRecipients,
              blockUnknownRecipients: body.policy.blockUnknownRecipients,
            },
            { recipient: body.recipient, amount: parse(body.amount) },
            {
              remainingDailyBudget: parse(body.policy.remainingDailyBudget),
              repeatCount: body.context?.repeatCount ?? 0,
              proofDecision: body.context?.proofDecision,
            },
          );
      return {
        decision,
        reasons,
        advisory: true as const,
        enforced: false as const,
        executionAuthorized: false as const,
        automaticPayment: false as const,
        agentId: body.agentId,
        requestId: body.requestId,
        evaluatedAt: on('fixedtime') ? fixedTime : deps.clock.now().toISOString(),
        optionalChecks,
      };
    },
  );
  await app.ready();
  return app;
}

export const EVALUATE_LOAD = {
  requests: [{ method: 'POST' as const, path: '/api/spendpolicy/evaluate', headers: { 'content-type': 'application/json' }, body: JSON.stringify(EVALUATE_BODY) }],
  expectStatus: 200,
  expectBodyIncludes: '"decision":"APPROVE"',
};

/** A temporary SQLite database and the service's infrastructure on it. */
export async function openBenchInfrastructure(): Promise<{ deps: AppDeps; close(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'paywarden-bench-'));
  const config = testConfig({ databaseUrl: `sqlite:${join(dir, 'bench.sqlite')}`, rateLimits: false, logLevel: 'silent' });
  const infra = await openInfrastructure(config);
  return {
    deps: infra,
    async close() {
      await infra.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const target: TargetModule = {
  async start(): Promise<RunningTarget> {
    const flags = parseFlags(process.env.BENCH_VARIANT ?? '');
    const infra = await openBenchInfrastructure();
    const app = await buildVariant(flags, infra.deps);
    return {
      listen: (opts) => app.listen(opts),
      inject: injectWith(app),
      load: { ...EVALUATE_LOAD, description: `evaluate variant [${[...flags].join(',') || 'as buildApp'}]` },
      async close() {
        await app.close();
        await infra.close();
      },
    };
  },
};

export default target;
