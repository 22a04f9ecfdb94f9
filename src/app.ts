import swagger from '@fastify/swagger';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { pino } from 'pino';
import Fastify, { type FastifyInstance, type FastifyRequest, type FastifyServerOptions } from 'fastify';
import type { Config } from './config.js';
import type { Clock } from './platform/clock.js';
import type { Database } from './platform/db/database.js';
import { installCors } from './platform/cors.js';
import { BODY_LIMIT, clientError, frameworkError, refuseConnect, refuseExpectation, genReqId, HTTP_OPTIONS, installErrorHandling, installValidators, MAX_HEADERS_COUNT } from './platform/http.js';
import { ADDRESS_FORMAT } from './platform/schemas.js';
import { installOptionalBodies, openApiOptions } from './platform/openapi.js';
import { redactKeys } from './platform/errors.js';
import type { RateLimiter } from './platform/rate-limit.js';
import { catalogueRoutes } from './features/catalogue/routes.js';
import { healthRoutes } from './features/health/routes.js';
import { leadRoutes } from './features/leads/routes.js';
import { evaluateRoutes } from './features/spend-policy/evaluate-routes.js';
import { decisionRoutes } from './features/spend-policy/decision-routes.js';
import { DecisionService } from './features/spend-policy/decisions.js';
import { policyRoutes } from './features/spend-policy/policy-routes.js';
import { jwksRoutes } from './features/receipts/routes.js';
import { reportRoutes } from './features/reports/routes.js';
import { createChainClient, type ChainClient } from './platform/chain.js';
import { evidenceRoutes } from './features/evidence/routes.js';
import { ReceiptSigner } from './platform/receipts.js';
import { tokenRoutes } from './features/tokens/routes.js';
import type { MarketDeps } from './features/tokens/service.js';

export interface AppDeps {
  config: Config;
  database: Database;
  clock: Clock;
  limiter: RateLimiter;
  /** Loaded from configuration or the database when not given. */
  receipts?: ReceiptSigner;
  /** The Base client; built from BASE_RPC_URLS when not given. */
  chain?: ChainClient;
  /** Market-data providers and token chain reads for the token tools; built from configuration when not given. */
  market?: MarketDeps;
  /** pino options, or false for silence (tests); defaults to the configured level. */
  logger?: FastifyServerOptions['logger'];
}

export type App = FastifyInstance;

type SerializedError = ReturnType<typeof pino.stdSerializers.err>;

/** PostgreSQL's detail of a refused row (not-null, check constraint): every value of the row. */
const FAILING_ROW = /^Failing row contains/;

/**
 * A network URL (http, ws, redis, postgres: not the file: URLs of a stack trace): its scheme, user
 * info, host and port, and whatever follows (path, query, fragment).
 */
const ABSOLUTE_URL = /\b((?:https?|wss?|rediss?|postgres(?:ql)?):\/\/)(?:[^\s/?#"'<>@]*@)?([^\s/?#"'<>]*)([^\s"'<>]*)/gi;

/**
 * What may be a credential in the configured URLs, with the name it is logged under instead: path
 * segments and query values of 16 characters or more (an RPC provider's API key, 32 characters at
 * Alchemy and Infura; `v2`, `rpc` or `mainnet` are no secret) and login parts of 8 or more. An
 * upstream may quote them without the URL around them (an Express-style 404 says "Cannot POST
 * /v2/<key>", a provider names the key it refused, a driver the password it sent), too short for
 * redactKeys.
 */
function configSecrets(config: Config): Array<[secret: string, label: string]> {
  const urls: Array<[string | undefined, string]> = [
    ...config.rpcUrls.map((u): [string, string] => [u, '<rpc-key>']),
    [config.facilitatorUrl, '<facilitator-key>'],
    [config.marketDexscreenerUrl, '<market-key>'],
    [config.marketGeckoterminalUrl, '<market-key>'],
    [config.redisUrl, '<redis-credential>'],
    [config.databaseUrl, '<database-credential>'],
  ];
  const found = new Map<string, string>();
  for (const [url, label] of urls) {
    let u: URL;
    try {
      u = new URL(url ?? '');
    } catch {
      continue;
    }
    const long = [...u.pathname.split('/'), ...u.searchParams.values()].filter((p) => p.length >= 16);
    const login = [u.username, u.password].filter((p) => p.length >= 8);
    for (const part of [...long, ...login]) {
      found.set(part, label);
      try {
        found.set(decodeURIComponent(part), label);
      } catch {
        /* not percent-encoded text */
      }
    }
  }
  return [...found];
}

/**
 * Text as a log line may show it. `message`: keys redacted (redactKeys) and the configuration's
 * credentials left out (configSecrets). `error`, for what errors say: each absolute URL also cut to
 * its scheme and host (viem writes the URL of a failed request into its message, its
 * `metaMessages` and its `url`).
 */
function textScrubbers(config: Config): { message(text: string): string; error(text: string): string } {
  const secrets = configSecrets(config);
  const message = (text: string) => {
    let out = redactKeys(text);
    for (const [secret, label] of secrets) out = out.replaceAll(secret, label);
    return out;
  };
  return {
    message,
    error: (text) => message(text).replace(ABSOLUTE_URL, (_url, scheme: string, host: string, rest: string) => `${scheme}${host}${rest && rest !== '/' ? '/…' : rest}`),
  };
}

/**
 * pino's arguments with every string scrubbed. pino takes an error's message as the line's
 * message when none is given (`log.error(err)`, `log.warn({ err })`, as Fastify itself logs), and
 * it does so after this hook: that message is given here, scrubbed.
 */
function scrubbedLogArgs(args: unknown[], scrub: ReturnType<typeof textScrubbers>): unknown[] {
  const [first, second] = args;
  if (typeof second !== 'string' && first !== null && typeof first === 'object') {
    const err = first instanceof Error ? first : (first as { err?: unknown; msg?: unknown }).msg === undefined ? (first as { err?: unknown }).err : undefined;
    if (err instanceof Error) return [first, scrub.error(err.message), ...args.slice(1)];
  }
  return args.map((a) => (typeof a === 'string' ? scrub.message(a) : a));
}

/**
 * A serialized error as a log line may show it. pino copies every enumerable member of an error
 * as it is, and drivers attach what they sent or would have stored: ioredis the failed command
 * with its arguments (those of the AUTH it sends on connecting are REDIS_URL's password, logged
 * whenever Redis refused it), PostgreSQL the whole row a constraint refused ("Failing row
 * contains (…)": key hashes, a paid report's signed payment authorization), viem the request's
 * URL. Every string in it is scrubbed (textScrubbers' `error`), a few levels deep: the message and stack,
 * members, and errors nested in members (pino serializes those too, `aggregateErrors` included).
 */
function scrubbedError(e: Record<string, unknown>, scrubbedText: (text: string) => string): Record<string, unknown> {
  const scrub = (v: unknown, depth: number): unknown => {
    if (typeof v === 'string') return scrubbedText(v);
    if (v === null || typeof v !== 'object' || depth > 4) return v;
    if (Array.isArray(v)) return v.map((x) => scrub(x, depth + 1));
    // Plain objects and errors (pino's serialized ones have a prototype of their own); a Buffer,
    // a Date or a class instance is written as pino would write it.
    const proto = Object.getPrototypeOf(v) as unknown;
    if (proto !== Object.prototype && proto !== null && typeof (v as { stack?: unknown }).stack !== 'string') return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = scrub(x, depth + 1);
    const command = out.command;
    if (command !== null && typeof command === 'object' && 'args' in command) {
      out.command = { name: (command as { name?: unknown }).name, args: '[redacted]' };
    }
    if (typeof out.detail === 'string' && FAILING_ROW.test(out.detail)) out.detail = 'Failing row contains [redacted]';
    return out;
  };
  return scrub(e, 0) as Record<string, unknown>;
}

/** pino options: the configured level, and credentials never written to a log line. */
export function loggerOptions(config: Config, destination?: NodeJS.WritableStream) {
  const scrub = textScrubbers(config);
  return {
    level: config.logLevel,
    redact: ['req.headers.authorization', 'req.headers["payment-signature"]', 'req.headers["recovery-key"]'],
    serializers: {
      // Fastify's own request serializer, with the URL redacted.
      req: (req: FastifyRequest) => ({
        method: req.method,
        url: redactKeys(req.url),
        host: redactKeys(req.host),
        remoteAddress: req.ip,
        remotePort: req.socket?.remotePort,
      }),
      // pino's error serializer, with the message and stack redacted (an error may quote input)
      // and what drivers attach to their errors scrubbed (see scrubbedError). Anything else
      // logged as `err` (a string, a plain object thrown) is passed as pino would.
      err: (err: Error): SerializedError => {
        const out = pino.stdSerializers.err(err) as unknown;
        if (out === null || typeof out !== 'object') return (typeof out === 'string' ? scrub.error(out) : out) as SerializedError;
        return scrubbedError(out as Record<string, unknown>, scrub.error) as SerializedError;
      },
    },
    // Every message is redacted too: messages quote what a caller sent (a member name, a path).
    hooks: {
      logMethod(this: unknown, args: unknown[], method: (...a: unknown[]) => void) {
        method.apply(this, scrubbedLogArgs(args, scrub));
      },
    },
    ...(destination ? { stream: destination } : {}),
  };
}

/** The whole service as a function of its dependencies; tests drive it with inject(). */
export async function buildApp(deps: AppDeps): Promise<App> {
  const app = Fastify({
    logger: deps.logger ?? loggerOptions(deps.config),
    genReqId,
    bodyLimit: BODY_LIMIT,
    trustProxy: deps.config.trustProxy.length ? deps.config.trustProxy : false,
    routerOptions: { ignoreTrailingSlash: true },
    frameworkErrors: frameworkError,
    clientErrorHandler: clientError,
    // The serializer's own ajv (it picks anyOf branches) needs to know the address format too,
    // or it warns on every response schema holding an address; any address written passes.
    serializerOpts: { ajv: { formats: { [ADDRESS_FORMAT]: true } } },
    ...HTTP_OPTIONS,
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.server.maxHeadersCount = MAX_HEADERS_COUNT;
  app.server.on('connect', refuseConnect.bind(app));
  app.server.on('checkExpectation', refuseExpectation.bind(app));
  installValidators(app);
  installOptionalBodies(app);
  installCors(app, installErrorHandling(app));
  await app.register(swagger, openApiOptions(deps.config));

  await app.register(healthRoutes, deps);
  await app.register(catalogueRoutes, deps);
  await app.register(evaluateRoutes, deps);
  await app.register(leadRoutes, deps);

  const receipts = deps.receipts ?? (await ReceiptSigner.load(deps.database, deps.config.receiptSigningKey));
  const decisions = new DecisionService(deps.database, receipts, deps.config.approvalTtlSeconds);
  await app.register(jwksRoutes, { ...deps, receipts });
  await app.register(policyRoutes, { ...deps, decisions });
  await app.register(decisionRoutes, { ...deps, decisions });
  // One Base client for paid reports and evidence checks.
  const chain = deps.chain ?? createChainClient(deps.config);
  // The same URLs without the Base check, for the one report about whichever chain they serve.
  const anyChain = deps.chain ?? createChainClient(deps.config, { anyChain: true });
  await app.register(reportRoutes, { ...deps, receipts, chain, anyChain });
  await app.register(evidenceRoutes, { ...deps, receipts, decisions, chain });
  await app.register(tokenRoutes, { ...deps, chain });
  return app;
}
