import { isIP } from 'node:net';
import { Type, type Static } from 'typebox';
import { Value } from 'typebox/value';
import { parse as parsePgUrl } from 'pg-connection-string';
import { USDC_ADDRESS } from './platform/prices.js';
import { ADDRESS_PATTERN, checksumHolds } from './platform/schemas.js';

/**
 * Every environment variable the service reads, in one schema. It is parsed once at start; a
 * bad value stops the start with a message naming the variable. The README's configuration
 * table mirrors the descriptions here.
 */
const bool = (def: 'on' | 'off', description: string) =>
  Type.String({ default: def, pattern: '^(on|off|true|false|1|0)$', description });
/**
 * A count, limit, duration or timeout: a whole number of at least 1. Zero would not switch
 * anything off: it would expire every approval and order at once, time out every upstream call,
 * or count a transfer without confirmations (RATE_LIMITS and EVIDENCE_CHAINS switch things off).
 */
/**
 * A whole number from `from` (1, or 0) to 10^digits - 1, written as plain digits; `wholeFrom` and
 * `wholeUpTo` name the limits for the error message.
 */
const int = (def: number, description: string, digits = 9, from: 0 | 1 = 1) =>
  Type.String({
    default: String(def),
    pattern: `^(${from === 0 ? '0|' : ''}[1-9][0-9]{0,${digits - 1}})$`,
    wholeFrom: String(from),
    wholeUpTo: '9'.repeat(digits),
    description,
  });
/**
 * Timeouts have at most 7 digits (under 10,000 s): the shutdown waits for two facilitator calls and
 * a chain read, and a wait beyond Node's timer limit (2^31 - 1 ms) would fire at once instead.
 */
const TIMEOUT_DIGITS = 7;
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
  REDIS_KEY_PREFIX: Type.String({
    default: 'paywarden:rl',
    pattern: '^[A-Za-z0-9:._-]{1,100}$',
    description: 'Prefix of the rate-limit keys in Redis: give each deployment that shares one Redis (staging and production, say) its own',
  }),
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
  ORDER_LIMIT: int(600, 'Recovery orders one source may create per hour'),
  REFUSED_PAYMENT_LIMIT: int(60, 'Payments the facilitator may refuse for one source per hour; beyond, its paid requests with a payment get 429 before any facilitator call'),
  APPROVAL_TTL_SECONDS: int(3600, 'How long a HUMAN_APPROVAL request can be approved'),
  BASE_RPC_URLS: Type.String({
    default: 'https://mainnet.base.org',
    pattern: '^https?://[^\\s,]+(,\\s*https?://[^\\s,]+)*$',
    description: 'Comma-separated Base JSON-RPC URLs, tried in order (viem fallback transport)',
  }),
  FACILITATOR_URL: Type.String({
    default: 'https://api.cdp.coinbase.com/platform/v2/x402',
    pattern: '^https?://[^\\s]+$',
    description: 'x402 facilitator (verify, settle, supported)',
  }),
  CDP_API_KEY_ID: optional('Coinbase CDP API key id, for the production facilitator'),
  CDP_API_KEY_SECRET: optional('Coinbase CDP API key secret, for the production facilitator'),
  PAY_TO: optional('Address that receives report payments; paid reports answer 503 until it is set', ADDRESS_PATTERN),
  MIN_CONFIRMATIONS: int(1, 'Confirmations before a transfer counts as settled or verified'),
  FACILITATOR_TIMEOUT_MS: int(15000, 'Timeout of each facilitator request; a settle that times out answers 202 (pending)', TIMEOUT_DIGITS),
  RPC_TIMEOUT_MS: int(10000, 'Timeout of each Base RPC request', TIMEOUT_DIGITS),
  RPC_LOG_BLOCK_RANGE: int(
    5000,
    'Most blocks one eth_getLogs request may span (providers refuse wider ranges), at most 9999999; payment recovery reads logs in chunks of this size',
    7,
  ),
  RECOVERY_TTL_SECONDS: int(7 * 86400, 'How long a recovery order can restore its report'),
  PAID_REPLAY_WINDOW_SECONDS: int(3600, 'How long after a paid report was delivered its payment signature alone still brings it back', 5, 0),
  MARKET_DEXSCREENER_URL: Type.String({
    default: 'https://api.dexscreener.com',
    pattern: '^https?://[^\\s]+$',
    description: 'DexScreener API base URL (first market-data provider)',
  }),
  MARKET_GECKOTERMINAL_URL: Type.String({
    default: 'https://api.geckoterminal.com',
    pattern: '^https?://[^\\s]+$',
    description: 'GeckoTerminal API base URL, without /api/v2 (second market-data provider, used on failover)',
  }),
  MARKET_TIMEOUT_MS: int(3000, 'Timeout of each market-data provider request (each is retried once on a transport error, 5xx or 429)', TIMEOUT_DIGITS),
  EVIDENCE_CHAINS: bool('on', 'off turns the evidence-chain endpoints off (they answer 404)'),
  EVIDENCE_LIMIT: int(600, 'Evidence-chain requests one policy may make per hour'),
  RECEIPT_SIGNING_KEY: optional('Ed25519 private key (PKCS#8 PEM or base64url seed) for receipts; generated and stored in the database when unset'),
});

export type Env = Static<typeof EnvSchema>;

export interface Config {
  host: string;
  port: number;
  databaseUrl: string;
  redisUrl: string | undefined;
  redisKeyPrefix: string;
  trustProxy: string[];
  publicBaseUrl: string;
  logLevel: string;
  rateLimits: boolean;
  policyCreateLimit: number;
  leadLimit: number;
  orderLimit: number;
  refusedPaymentLimit: number;
  approvalTtlSeconds: number;
  receiptSigningKey: string | undefined;
  rpcUrls: string[];
  facilitatorUrl: string;
  cdpApiKeyId: string | undefined;
  cdpApiKeySecret: string | undefined;
  payTo: string | undefined;
  minConfirmations: number;
  facilitatorTimeoutMs: number;
  rpcTimeoutMs: number;
  rpcLogBlockRange: number;
  recoveryTtlSeconds: number;
  paidReplayWindowSeconds: number;
  marketDexscreenerUrl: string;
  marketGeckoterminalUrl: string;
  marketTimeoutMs: number;
  evidenceChains: boolean;
  evidenceLimit: number;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const truthy = (v: string) => v === 'on' || v === 'true' || v === '1';

/** What Fastify's trustProxy (proxy-addr) accepts: an address, address/prefix, IPv4 address/netmask, or a named range. */
function isProxyAddress(entry: string): boolean {
  if (entry === 'loopback' || entry === 'linklocal' || entry === 'uniquelocal') return true;
  const slash = entry.lastIndexOf('/');
  const addr = slash === -1 ? entry : entry.slice(0, slash);
  const kind = isIP(addr);
  if (kind === 0) return false;
  if (slash === -1) return true;
  const range = entry.slice(slash + 1);
  if (/^[0-9]{1,3}$/.test(range)) {
    const bits = Number(range);
    // proxy-addr matches an IPv4-mapped range (::ffff:10.0.0.0/104) against IPv4 clients only
    // from /96 up: a shorter one would be accepted and then trust no proxy at all.
    if (kind === 6 && /^::ffff:/i.test(addr) && isIP(addr.slice(7)) === 4) return bits >= 96 && bits <= 128;
    return bits >= 1 && bits <= (kind === 6 ? 128 : 32);
  }
  // An IPv4 netmask such as 255.255.255.0: contiguous ones, then zeros.
  if (kind !== 4 || isIP(range) !== 4) return false;
  const mask = range.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const inverted = 0xffffffff - mask;
  return mask !== 0 && (inverted & (inverted + 1)) === 0;
}

/**
 * Where report payments go. A typo must stop the start, not send payments to an address nobody
 * holds: a mixed-case address must carry a valid EIP-55 checksum, and the zero address and the
 * USDC contract itself (tokens sent there are lost) are refused.
 */
function payToProblems(payTo: string): string[] {
  if (/^0x0{40}$/i.test(payTo)) return ['PAY_TO: the zero address cannot receive payments'];
  if (payTo.toLowerCase() === USDC_ADDRESS.toLowerCase()) return ['PAY_TO: the USDC contract itself cannot receive payments (they would be lost)'];
  if (!checksumHolds(payTo)) {
    return ['PAY_TO: the EIP-55 checksum of this mixed-case address does not match: a character is wrong; copy the address again from where it came from'];
  }
  return [];
}

/**
 * Why a URL variable's value is not usable (undefined when it is), parsed the way its client
 * parses it: node-postgres's own parser for DATABASE_URL, the WHATWG URL of fetch for the others.
 * `base`: a URL the service appends paths to, where a query string or fragment would end up in
 * front of them. The value is never quoted: a database URL may hold a password.
 */
function urlProblem(name: string, value: string, base: boolean): string | undefined {
  try {
    if (name === 'DATABASE_URL') {
      parsePgUrl(value);
      return undefined;
    }
    const url = new URL(value);
    // ioredis reads the path (or ?db=) as the database index: anything but digits becomes NaN,
    // and its SELECT NaN then fails unhandled once connected, killing the running service.
    if (name === 'REDIS_URL') {
      const db = url.searchParams.get('db') ?? url.pathname.replace(/^\//, '');
      if (db !== '' && !/^[0-9]{1,9}$/.test(db)) return `${name}: the database index (the path, or ?db=) must be a whole number, such as redis://127.0.0.1:6379/0`;
      return undefined; // a password in it is how Redis is given one
    }
    // A user name or password: viem (BASE_RPC_URLS) sends them as basic auth; fetch (the other
    // URLs) refuses such a URL at every request, with an error that quotes it whole into the log.
    if (url.username || url.password) {
      if (name !== 'BASE_RPC_URLS') return `${name}: must carry no user name or password (put an API key where its provider says: a header, the path)`;
      if (!isBasicAuth(url)) return `${name}: a user name and password must both be given, percent-encoded (viem sends them as basic auth)`;
    }
    // The raw text: an empty query (a bare ? or #) leaves URL.search and URL.hash empty.
    if (base && /[?#]/.test(value)) return `${name}: must have no query string or fragment (the service appends paths to it)`;
    return undefined;
  } catch (err) {
    // node-postgres reads the files sslrootcert, sslcert and sslkey name while it parses.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'EACCES') {
      return `${name}: a file it names (sslrootcert, sslcert or sslkey) cannot be read`;
    }
    return `${name}: not a valid URL (check its host, port and percent-encoding)`;
  }
}

/** What viem turns into basic auth: a user name, and both parts percent-decodable (else it sends the URL as is, which fetch refuses). */
function isBasicAuth(url: URL): boolean {
  try {
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
    return url.username !== '';
  } catch {
    return false;
  }
}

/** localhost, or a loopback IP address (127.0.0.0/8, ::1): never a DNS name like 127.example.com. */
function isLoopbackUrl(url: string): boolean {
  try {
    const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
    return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
  } catch {
    return false;
  }
}

export function parseConfig(source: Record<string, string | undefined> = process.env): Config {
  const raw: Record<string, string> = {};
  for (const key of Object.keys(EnvSchema.properties)) {
    const v = source[key];
    // An empty variable means "unset", as shells and .env files commonly write it.
    if (v !== undefined && v !== '') raw[key] = v;
  }
  const env = Value.Default(EnvSchema, raw) as Env;
  const problems = [...Value.Errors(EnvSchema, env)].map((e) => {
    const name = e.instancePath.replace(/^\//, '');
    const { wholeFrom, wholeUpTo: max } = (EnvSchema.properties as Record<string, { wholeFrom?: string; wholeUpTo?: string }>)[name] ?? {};
    return `${name}: ${max ? `must be a whole number from ${wholeFrom} to ${max}, got ${JSON.stringify(raw[name])}` : e.message}`;
  });
  const port = Number(env.PORT);
  if (!problems.length && (port < 1 || port > 65535)) problems.push('PORT: must be between 1 and 65535');
  const trustProxy = env.TRUST_PROXY.split(',').map((s) => s.trim()).filter(Boolean);
  // Checked here so that a typo stops the start naming the variable, not deep inside Fastify.
  for (const entry of trustProxy) {
    if (!isProxyAddress(entry)) problems.push(`TRUST_PROXY: ${JSON.stringify(entry)} is not an IP address, CIDR range, loopback, linklocal or uniquelocal`);
  }
  const urls: Array<[string, string | undefined, boolean]> = [
    ['DATABASE_URL', env.DATABASE_URL.startsWith('postgres') ? env.DATABASE_URL : undefined, false],
    ['REDIS_URL', env.REDIS_URL, false],
    ['PUBLIC_BASE_URL', env.PUBLIC_BASE_URL, true],
    ['FACILITATOR_URL', env.FACILITATOR_URL, true],
    ['MARKET_DEXSCREENER_URL', env.MARKET_DEXSCREENER_URL, true],
    ['MARKET_GECKOTERMINAL_URL', env.MARKET_GECKOTERMINAL_URL, true],
    ...env.BASE_RPC_URLS.split(',').map((u): [string, string, boolean] => ['BASE_RPC_URLS', u.trim(), false]),
  ];
  for (const [name, value, base] of urls) {
    const problem = value === undefined || problems.some((p) => p.startsWith(`${name}:`)) ? undefined : urlProblem(name, value, base);
    if (problem) problems.push(problem);
  }
  // The service adds /api/v2 itself: given twice, every failover request would miss.
  if (/\/api\/v2\/*$/i.test(env.MARKET_GECKOTERMINAL_URL)) problems.push('MARKET_GECKOTERMINAL_URL: give the base URL without /api/v2 (the service adds it)');
  if (!env.CDP_API_KEY_ID !== !env.CDP_API_KEY_SECRET) problems.push('CDP_API_KEY_ID and CDP_API_KEY_SECRET: set both or neither');
  if (env.PAY_TO) problems.push(...payToProblems(env.PAY_TO));
  // The CDP keys sign every facilitator request: never over plain http beyond this machine.
  if (env.CDP_API_KEY_ID && /^http:/i.test(env.FACILITATOR_URL) && !isLoopbackUrl(env.FACILITATOR_URL)) {
    problems.push('FACILITATOR_URL: must be https when CDP_API_KEY_ID is set (plain http only to a facilitator on this machine)');
  }
  if (problems.length) throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);

  return {
    host: env.HOST,
    port,
    databaseUrl: env.DATABASE_URL,
    redisUrl: env.REDIS_URL,
    redisKeyPrefix: env.REDIS_KEY_PREFIX,
    trustProxy,
    publicBaseUrl: (env.PUBLIC_BASE_URL ?? `http://${env.HOST.includes(':') ? `[${env.HOST}]` : env.HOST}:${port}`).replace(/\/+$/, ''),
    logLevel: env.LOG_LEVEL,
    rateLimits: truthy(env.RATE_LIMITS),
    policyCreateLimit: Number(env.POLICY_CREATE_LIMIT),
    leadLimit: Number(env.LEAD_LIMIT),
    orderLimit: Number(env.ORDER_LIMIT),
    refusedPaymentLimit: Number(env.REFUSED_PAYMENT_LIMIT),
    approvalTtlSeconds: Number(env.APPROVAL_TTL_SECONDS),
    receiptSigningKey: env.RECEIPT_SIGNING_KEY,
    rpcUrls: env.BASE_RPC_URLS.split(',').map((s) => s.trim()),
    facilitatorUrl: env.FACILITATOR_URL.replace(/\/+$/, ''),
    cdpApiKeyId: env.CDP_API_KEY_ID,
    cdpApiKeySecret: env.CDP_API_KEY_SECRET,
    payTo: env.PAY_TO,
    minConfirmations: Number(env.MIN_CONFIRMATIONS),
    facilitatorTimeoutMs: Number(env.FACILITATOR_TIMEOUT_MS),
    rpcTimeoutMs: Number(env.RPC_TIMEOUT_MS),
    rpcLogBlockRange: Number(env.RPC_LOG_BLOCK_RANGE),
    recoveryTtlSeconds: Number(env.RECOVERY_TTL_SECONDS),
    paidReplayWindowSeconds: Number(env.PAID_REPLAY_WINDOW_SECONDS),
    marketDexscreenerUrl: env.MARKET_DEXSCREENER_URL.replace(/\/+$/, ''),
    marketGeckoterminalUrl: env.MARKET_GECKOTERMINAL_URL.replace(/\/+$/, ''),
    marketTimeoutMs: Number(env.MARKET_TIMEOUT_MS),
    evidenceChains: truthy(env.EVIDENCE_CHAINS),
    evidenceLimit: Number(env.EVIDENCE_LIMIT),
  };
}

/** Configuration for tests and tools: defaults plus overrides, never the process environment. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  return { ...parseConfig({}), ...overrides };
}
