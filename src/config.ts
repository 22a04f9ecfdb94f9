import { Type, type Static } from 'typebox';
import { Value } from 'typebox/value';

/**
 * Every environment variable the service reads, in one schema. It is parsed once at start; a
 * bad value stops the start with a message naming the variable. The README's configuration
 * table mirrors the descriptions here.
 */
const bool = (def: 'on' | 'off', description: string) =>
  Type.String({ default: def, pattern: '^(on|off|true|false|1|0)$', description });
const int = (def: number, description: string) =>
  Type.String({ default: String(def), pattern: '^[0-9]{1,9}$', description });
const optional = (description: string, pattern?: string) =>
  Type.Optional(Type.String(pattern ? { description, pattern } : { description }));

export const EnvSchema = Type.Object({
  HOST: Type.String({ default: '127.0.0.1', minLength: 1, description: 'Address to listen on' }),
  PORT: Type.String({ default: '8402', pattern: '^[0-9]{1,5}$', description: 'TCP port to listen on' }),
  DATABASE_URL: Type.String({
    default: 'sqlite:./data/paywarden.sqlite',
    pattern: '^(sqlite:.+|postgres(ql)?://.+)$',
    description: 'sqlite:<file> (embedded default) or postgres://… (several instances behind a load balancer)',
  }),
  REDIS_URL: optional('redis://… to share rate limits across instances; in-process when unset', '^rediss?://.+$'),
  TRUST_PROXY: Type.String({
    default: '',
    description: 'Comma-separated addresses or CIDRs of trusted proxies; only then does X-Forwarded-For name the source',
  }),
  PUBLIC_BASE_URL: optional('Base URL the service is reached at (catalogue links, x402 resource URLs)', '^https?://[^\\s]+$'),
  LOG_LEVEL: Type.String({
    default: 'info',
    pattern: '^(fatal|error|warn|info|debug|trace|silent)$',
    description: 'pino log level',
  }),
  RATE_LIMITS: bool('on', 'off turns every per-source rate limit off (benchmarks only)'),
  POLICY_CREATE_LIMIT: int(20, 'Protected policies one source may create per day'),
  LEAD_LIMIT: int(10, 'Pilot leads one source may submit per hour'),
  APPROVAL_TTL_SECONDS: int(3600, 'How long a HUMAN_APPROVAL request can be approved'),
  RECEIPT_SIGNING_KEY: optional('Ed25519 private key (PKCS#8 PEM or base64url seed) for receipts; generated and stored in the database when unset'),
});

export type Env = Static<typeof EnvSchema>;

export interface Config {
  host: string;
  port: number;
  databaseUrl: string;
  redisUrl: string | undefined;
  trustProxy: string[];
  publicBaseUrl: string;
  logLevel: string;
  rateLimits: boolean;
  policyCreateLimit: number;
  leadLimit: number;
  approvalTtlSeconds: number;
  receiptSigningKey: string | undefined;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const truthy = (v: string) => v === 'on' || v === 'true' || v === '1';

export function parseConfig(source: Record<string, string | undefined> = process.env): Config {
  const raw: Record<string, string> = {};
  for (const key of Object.keys(EnvSchema.properties)) {
    const v = source[key];
    // An empty variable means "unset", as shells and .env files commonly write it.
    if (v !== undefined && v !== '') raw[key] = v;
  }
  const env = Value.Default(EnvSchema, raw) as Env;
  const problems = [...Value.Errors(EnvSchema, env)].map(
    (e) => `${e.instancePath.replace(/^\//, '')}: ${e.message}`,
  );
  const port = Number(env.PORT);
  if (!problems.length && (port < 1 || port > 65535)) problems.push('PORT: must be between 1 and 65535');
  if (problems.length) throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);

  return {
    host: env.HOST,
    port,
    databaseUrl: env.DATABASE_URL,
    redisUrl: env.REDIS_URL,
    trustProxy: env.TRUST_PROXY.split(',').map((s) => s.trim()).filter(Boolean),
    publicBaseUrl: (env.PUBLIC_BASE_URL ?? `http://${env.HOST.includes(':') ? `[${env.HOST}]` : env.HOST}:${port}`).replace(/\/+$/, ''),
    logLevel: env.LOG_LEVEL,
    rateLimits: truthy(env.RATE_LIMITS),
    policyCreateLimit: Number(env.POLICY_CREATE_LIMIT),
    leadLimit: Number(env.LEAD_LIMIT),
    approvalTtlSeconds: Number(env.APPROVAL_TTL_SECONDS),
    receiptSigningKey: env.RECEIPT_SIGNING_KEY,
  };
}

/** Configuration for tests and tools: defaults plus overrides, never the process environment. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  return { ...parseConfig({}), ...overrides };
}
