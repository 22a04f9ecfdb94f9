import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, testConfig } from '../../src/config.js';
import { checkCdpKey } from '../../src/platform/x402.js';

/** The ConfigError thrown for `env`, failing the test when none is thrown. */
function configError(env: Record<string, string | undefined>): ConfigError {
  try {
    parseConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error(`parseConfig accepted ${JSON.stringify(env)}`);
}

describe('parseConfig', () => {
  // toMatchObject: later issues add variables of their own; these are the foundation's.
  it('has the documented defaults when nothing is set', () => {
    expect(parseConfig({})).toMatchObject({
      host: '127.0.0.1',
      port: 8402,
      databaseUrl: 'sqlite:./data/paywarden.sqlite',
      trustProxy: [],
      publicBaseUrl: 'http://127.0.0.1:8402',
      logLevel: 'info',
      rateLimits: true,
      policyCreateLimit: 20,
      leadLimit: 10,
      approvalTtlSeconds: 3600,
    });
    expect(parseConfig({}).redisUrl).toBeUndefined();
    expect(parseConfig({}).receiptSigningKey).toBeUndefined();
  });

  it('treats an empty variable as unset', () => {
    expect(parseConfig({ PORT: '', LOG_LEVEL: '', DATABASE_URL: '', RATE_LIMITS: '', TRUST_PROXY: '' })).toEqual(parseConfig({}));
  });

  it('ignores variables it does not know', () => {
    expect(parseConfig({ SOMETHING_ELSE: 'x', PATH: '/bin' })).toEqual(parseConfig({}));
  });

  it('does not read the process environment when given a source', () => {
    const saved = process.env.PORT;
    process.env.PORT = '1234';
    try {
      expect(parseConfig({}).port).toBe(8402);
      expect(testConfig().port).toBe(8402);
    } finally {
      if (saved === undefined) delete process.env.PORT;
      else process.env.PORT = saved;
    }
  });

  it('reads every variable', () => {
    const c = parseConfig({
      HOST: '0.0.0.0',
      PORT: '9000',
      DATABASE_URL: 'postgres://user@db.example:5432/pw',
      REDIS_URL: 'redis://127.0.0.1:6379',
      TRUST_PROXY: '10.0.0.1, 192.168.0.0/16,loopback',
      PUBLIC_BASE_URL: 'https://pay.example.com/',
      LOG_LEVEL: 'debug',
      RATE_LIMITS: 'off',
      POLICY_CREATE_LIMIT: '5',
      LEAD_LIMIT: '3',
      APPROVAL_TTL_SECONDS: '60',
      RECEIPT_SIGNING_KEY: 'abc',
    });
    expect(c).toMatchObject({
      host: '0.0.0.0',
      port: 9000,
      databaseUrl: 'postgres://user@db.example:5432/pw',
      redisUrl: 'redis://127.0.0.1:6379',
      trustProxy: ['10.0.0.1', '192.168.0.0/16', 'loopback'],
      publicBaseUrl: 'https://pay.example.com',
      logLevel: 'debug',
      rateLimits: false,
      policyCreateLimit: 5,
      leadLimit: 3,
      approvalTtlSeconds: 60,
      receiptSigningKey: 'abc',
    });
  });

  it('derives the public base URL from host and port, bracketing IPv6', () => {
    expect(parseConfig({ HOST: 'localhost', PORT: '80' }).publicBaseUrl).toBe('http://localhost:80');
    expect(parseConfig({ HOST: '::1' }).publicBaseUrl).toBe('http://[::1]:8402');
  });

  it.each([
    ['on', true], ['true', true], ['1', true],
    ['off', false], ['false', false], ['0', false],
  ])('RATE_LIMITS=%s is %s', (value, expected) => {
    expect(parseConfig({ RATE_LIMITS: value }).rateLimits).toBe(expected);
  });

  it.each(['redis://127.0.0.1:6379', 'redis://127.0.0.1:6379/', 'redis://127.0.0.1:6379/3', 'rediss://:s3cret@redis.example:6380/0', 'redis://127.0.0.1:6379?db=2'])('accepts REDIS_URL %s', (url) => {
    expect(parseConfig({ REDIS_URL: url }).redisUrl).toBe(url);
  });

  it.each([
    'sqlite:./data/x.sqlite',
    'sqlite::memory:',
    'postgres://postgres@127.0.0.1:5432/test',
    'postgresql://u:p@h/db',
  ])('accepts DATABASE_URL %s', (url) => {
    expect(parseConfig({ DATABASE_URL: url }).databaseUrl).toBe(url);
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '-1'],
    ['PORT', '0'],
    ['PORT', '65536'],
    ['PORT', '70000'],
    ['PORT', '123456'],
    ['PORT', '80 '],
    ['PORT', '8.5'],
    ['LOG_LEVEL', 'verbose'],
    ['LOG_LEVEL', 'INFO'],
    ['DATABASE_URL', 'mysql://localhost/db'],
    ['DATABASE_URL', './data/file.sqlite'],
    ['DATABASE_URL', 'sqlite:'],
    ['DATABASE_URL', 'postgres://'],
    ['RATE_LIMITS', 'yes'],
    ['RATE_LIMITS', 'disabled'],
    ['REDIS_URL', 'localhost:6379'],
    // ioredis would SELECT NaN once connected, an unhandled rejection that kills the service.
    ['REDIS_URL', 'redis://127.0.0.1:6379/db0'],
    ['REDIS_URL', 'redis://127.0.0.1:6379/?db=abc'],
    ['REDIS_URL', 'redis://127.0.0.1:6379/-1'],
    ['REDIS_URL', 'redis://127.0.0.1:99999'],
    ['PUBLIC_BASE_URL', 'ftp://example.com'],
    ['PUBLIC_BASE_URL', 'example.com'],
    ['LEAD_LIMIT', 'ten'],
    ['LEAD_LIMIT', '-5'],
    ['POLICY_CREATE_LIMIT', '1e3'],
    ['APPROVAL_TTL_SECONDS', '1.5'],
    ['APPROVAL_TTL_SECONDS', '0'],
    ['RECOVERY_TTL_SECONDS', '0'],
    ['PAID_REPLAY_WINDOW_SECONDS', '-1'],
    ['PAID_REPLAY_WINDOW_SECONDS', '100000'],
    ['PAID_REPLAY_WINDOW_SECONDS', '00'],
    ['FACILITATOR_TIMEOUT_MS', '0'],
    ['RPC_TIMEOUT_MS', '0'],
    ['MARKET_TIMEOUT_MS', '0'],
    ['MIN_CONFIRMATIONS', '0'],
    ['LEAD_LIMIT', '0'],
    ['EVIDENCE_LIMIT', '007'],
    ['TRUST_PROXY', 'true'],
    ['TRUST_PROXY', 'proxy.internal'],
    ['TRUST_PROXY', '10.0.0.1,nonsense'],
    ['TRUST_PROXY', '10.0.0.0/33'],
    ['TRUST_PROXY', '10.0.0.0/0'],
    ['TRUST_PROXY', '10.0.0.0/255.0.255.0'],
    // A netmask of no ones is /0: every address would be a trusted proxy.
    ['TRUST_PROXY', '10.0.0.0/0.0.0.0'],
    // More digits than ioredis's SELECT takes.
    ['REDIS_URL', 'redis://127.0.0.1:6379/1234567890'],
    // One half of a CDP key pair.
    ['CDP_API_KEY_ID', 'organizations/x/apiKeys/y'],
    ['CDP_API_KEY_SECRET', 'secret'],
    ['TRUST_PROXY', '300.1.1.1'],
    // An IPv4-mapped range under /96 matches no IPv4 client in proxy-addr (10.0.0.0/8 is /104).
    ['TRUST_PROXY', '::ffff:10.0.0.0/8'],
    // Values the pattern lets through but their client could not use.
    ['DATABASE_URL', 'postgres://u:pw@[bad/db'],
    ['DATABASE_URL', 'postgres://u:pw@db.example:99999/db'],
    ['BASE_RPC_URLS', 'https://base.example, https://[bad'],
    ['BASE_RPC_URLS', 'https://base.example:70000'],
    // Paths are appended to these: a query string or fragment would end up in front of them.
    ['PUBLIC_BASE_URL', 'https://paywarden.example/?a=1'],
    ['FACILITATOR_URL', 'https://facilitator.example/x402#f'],
    ['MARKET_DEXSCREENER_URL', 'https://api.dexscreener.com/?key=1'],
    ['PUBLIC_BASE_URL', 'https://paywarden.example/?'],
    ['FACILITATOR_URL', 'https://facilitator.example/x402#'],
    ['MARKET_GECKOTERMINAL_URL', 'https://api.geckoterminal.com/api/v2'],
    ['MARKET_GECKOTERMINAL_URL', 'https://api.geckoterminal.com/api/v2/'],
    // A shutdown waits for two facilitator calls and a chain read: within Node's timer limit.
    ['FACILITATOR_TIMEOUT_MS', '10000000'],
    ['RPC_TIMEOUT_MS', '999999999'],
    ['MARKET_TIMEOUT_MS', '10000000'],
  ])('a bad %s (%j) throws a ConfigError naming the variable', (name, value) => {
    const err = configError({ [name]: value });
    expect(err.message).toContain(name);
  });

  it.each(['MARKET_DEXSCREENER_URL', 'MARKET_GECKOTERMINAL_URL', 'FACILITATOR_URL', 'PUBLIC_BASE_URL'])(
    'refuses a %s with a user name or password (fetch would refuse it, quoting the password into the log), without quoting it',
    (name) => {
      const err = configError({ [name]: 'https://me:s3cret-pw@provider.example' });
      expect(err.message).toContain(`${name}: must carry no user name or password`);
      expect(err.message).not.toContain('s3cret-pw');
    },
  );

  it('takes a BASE_RPC_URLS entry with a user name and password (viem sends them as basic auth)', () => {
    expect(parseConfig({ BASE_RPC_URLS: 'https://me:s3cret-pw@rpc.example/base' }).rpcUrls).toEqual(['https://me:s3cret-pw@rpc.example/base']);
  });

  it.each(['https://:s3cret-pw@rpc.example', 'https://us%zz:s3cret-pw@rpc.example', 'https://me:s3cret%zz@rpc.example'])(
    'refuses a BASE_RPC_URLS entry whose credentials viem would pass on to fetch (%s), without quoting them',
    (url) => {
      const err = configError({ BASE_RPC_URLS: url });
      expect(err.message).toContain('BASE_RPC_URLS: a user name and password must both be given');
      expect(err.message).not.toContain('s3cret');
    },
  );

  it('never quotes a database URL it refuses (it may hold a password)', () => {
    const err = configError({ DATABASE_URL: 'postgres://app:s3cret-pw@[db/paywarden' });
    expect(err.message).toContain('DATABASE_URL');
    expect(err.message).not.toContain('s3cret-pw');
  });

  it('says which file a database URL names cannot be read', () => {
    expect(configError({ DATABASE_URL: 'postgres://u@h/db?sslrootcert=/nonexistent/ca.pem' }).message).toMatch(/DATABASE_URL: a file it names .* cannot be read/);
  });

  it('accepts what the clients accept: a password with a space, a socket host, an RPC key in the query', () => {
    expect(() => parseConfig({ DATABASE_URL: 'postgres://u:p w@h/db' })).not.toThrow();
    expect(() => parseConfig({ DATABASE_URL: 'postgres:///db?host=/var/run/postgresql' })).not.toThrow();
    expect(parseConfig({ BASE_RPC_URLS: 'https://base.example/?apikey=1, https://b.example' }).rpcUrls).toEqual(['https://base.example/?apikey=1', 'https://b.example']);
    expect(parseConfig({ FACILITATOR_TIMEOUT_MS: '9999999', RPC_TIMEOUT_MS: '9999999' }).rpcTimeoutMs).toBe(9_999_999);
  });

  it('says what a whole-number variable takes', () => {
    expect(configError({ APPROVAL_TTL_SECONDS: '0' }).message).toBe(
      'invalid configuration: APPROVAL_TTL_SECONDS: must be a whole number from 1 to 999999999, got "0"',
    );
    expect(configError({ RPC_LOG_BLOCK_RANGE: '99999999' }).message).toBe(
      'invalid configuration: RPC_LOG_BLOCK_RANGE: must be a whole number from 1 to 9999999, got "99999999"',
    );
    expect(configError({ PAID_REPLAY_WINDOW_SECONDS: '1.5' }).message).toBe(
      'invalid configuration: PAID_REPLAY_WINDOW_SECONDS: must be a whole number from 0 to 99999, got "1.5"',
    );
    expect(parseConfig({ PAID_REPLAY_WINDOW_SECONDS: '0' }).paidReplayWindowSeconds).toBe(0);
    expect(parseConfig({}).paidReplayWindowSeconds).toBe(3600);
  });

  it('names every bad variable at once', () => {
    const err = configError({ PORT: 'x', LOG_LEVEL: 'loud' });
    expect(err.message).toContain('PORT');
    expect(err.message).toContain('LOG_LEVEL');
  });

  // A typo in PAY_TO would send every payment to an address nobody holds.
  it.each([
    ['the zero address', '0x0000000000000000000000000000000000000000'],
    ['the USDC contract', '0x833589fcd6edb6e08f4c7c32d4f71b54bda02913'],
    ['a mixed-case address with a wrong checksum', '0x70997970C51812dc3A010C7d01b50e0d17dc79c8'],
  ])('PAY_TO as %s stops the start', (_what, payTo) => {
    expect(configError({ PAY_TO: payTo }).message).toMatch(/^invalid configuration: PAY_TO: /);
  });

  it.each(['0x70997970C51812dc3A010C7d01b50e0d17dc79C8', '0x70997970c51812dc3a010c7d01b50e0d17dc79c8', '0X70997970C51812DC3A010C7D01B50E0D17DC79C8'.replace('0X', '0x')])(
    'PAY_TO %s (checksummed, or in one case) is accepted',
    (payTo) => {
      expect(parseConfig({ PAY_TO: payTo }).payTo).toBe(payTo);
    },
  );

  it('CDP keys never travel over plain http beyond this machine', () => {
    const keys = { CDP_API_KEY_ID: 'id', CDP_API_KEY_SECRET: 'secret' };
    expect(configError({ ...keys, FACILITATOR_URL: 'http://facilitator.example/x402' }).message).toContain('FACILITATOR_URL');
    // Names that only look like loopback addresses are names like any other.
    for (const url of ['http://127.attacker.example', 'http://127.0.0.1.nip.io/x402', 'http://localhost.example']) {
      expect(configError({ ...keys, FACILITATOR_URL: url }).message).toContain('FACILITATOR_URL');
    }
    expect(parseConfig({ ...keys, FACILITATOR_URL: 'http://[::1]:9000' }).facilitatorUrl).toBe('http://[::1]:9000');
    expect(parseConfig({ ...keys, FACILITATOR_URL: 'http://127.0.0.1:9000' }).facilitatorUrl).toBe('http://127.0.0.1:9000');
    expect(parseConfig({ ...keys, FACILITATOR_URL: 'https://facilitator.example/x402' }).cdpApiKeyId).toBe('id');
    expect(parseConfig({ FACILITATOR_URL: 'http://facilitator.example/x402' }).facilitatorUrl).toBe('http://facilitator.example/x402');
  });

  it('a CDP secret the SDK cannot sign with stops the start, without quoting it', async () => {
    for (const secret of ['not-a-key', Buffer.alloc(64, 7).toString('base64')]) {
      const err = await checkCdpKey({ cdpApiKeyId: 'organizations/x/apiKeys/y', cdpApiKeySecret: secret }).then(() => undefined, (e: unknown) => e);
      expect(err, secret).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toContain('CDP_API_KEY_SECRET');
      expect((err as Error).message).not.toContain(secret);
    }
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(-32);
    const secret = Buffer.concat([seed, publicKey.export({ format: 'der', type: 'spki' }).subarray(-32)]).toString('base64');
    await expect(checkCdpKey({ cdpApiKeyId: 'organizations/x/apiKeys/y', cdpApiKeySecret: secret })).resolves.toBeUndefined();
    await expect(checkCdpKey({ cdpApiKeyId: undefined, cdpApiKeySecret: undefined })).resolves.toBeUndefined();
  });

  it.each(['127.0.0.1', '::1', '10.0.0.0/8', '::ffff:10.0.0.0/104', 'fd00::/8', '10.0.0.0/255.0.0.0', 'loopback', 'linklocal', 'uniquelocal', '10.0.0.1, 10.0.0.2'])(
    'accepts TRUST_PROXY %j',
    (value) => {
      expect(parseConfig({ TRUST_PROXY: value }).trustProxy.length).toBeGreaterThan(0);
    },
  );
});

describe('testConfig', () => {
  it('is the defaults plus overrides', () => {
    expect(testConfig({ rateLimits: false, leadLimit: 2 })).toEqual({ ...parseConfig({}), rateLimits: false, leadLimit: 2 });
  });
});
