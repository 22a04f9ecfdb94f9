// The paywarden service wired to a running devnet, built exactly as src/main.ts builds it
// (parseConfig -> openInfrastructure -> buildApp -> listen), so `npm run devnet` exercises the
// same configuration path as production, only with the devnet's URLs forced in.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Address } from 'viem';
import { buildApp, loggerOptions, type App } from '../app.js';
import { parseConfig, type Config } from '../config.js';
import { openInfrastructure, type Infrastructure } from '../platform/deps.js';
import { freePort } from './chain.js';
import type { Devnet } from './index.js';

/** The devnet account that receives report payments (PAY_TO); pay from any other. */
export const PAY_TO_ACCOUNT_INDEX = 5;
/** The port `npm start` uses; the devnet takes it when free so the README's examples just work. */
export const PREFERRED_PORT = 8402;

export interface StartServiceOptions {
  /**
   * Base environment (default process.env). Everything in it is honoured (LOG_LEVEL,
   * RATE_LIMITS, FACILITATOR_TIMEOUT_MS, …) except what the devnet must decide: HOST, the
   * database, the RPC, the facilitator, PAY_TO and PUBLIC_BASE_URL. PORT, when set, is used
   * as is (and must be free); otherwise 8402 if free, else any free port.
   */
  env?: Record<string, string | undefined>;
  /** Default: a fresh SQLite file in a temporary directory, removed by stop(). */
  databaseUrl?: string;
  /** Default: devnet account 5. */
  payTo?: Address;
  /** Log level when the environment names none; default 'warn' (request logs drown the ready line). */
  defaultLogLevel?: string;
  /** Where the service logs (pino JSON); default stderr, so stdout carries only the ready line. */
  logStream?: NodeJS.WritableStream;
}

export interface ServiceHandle {
  /** http://127.0.0.1:port */
  url: string;
  /** The database the service uses; set it as DATABASE_URL to run the operator CLI against it. */
  databaseUrl: string;
  payTo: Address;
  config: Config;
  /** Idempotent: closes the server (waiting for in-flight requests), the database, and removes a temporary database. */
  stop(): Promise<void>;
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}


const isAddrInUse = (err: unknown) => (err as { code?: string } | null)?.code === 'EADDRINUSE';

export async function startService(devnet: Devnet, opts: StartServiceOptions = {}): Promise<ServiceHandle> {
  const env = opts.env ?? process.env;
  const payTo = opts.payTo ?? devnet.accounts[PAY_TO_ACCOUNT_INDEX]?.address;
  if (!payTo) throw new Error(`devnet account ${PAY_TO_ACCOUNT_INDEX} missing`);

  let tempDir: string | undefined;
  let databaseUrl = opts.databaseUrl;
  if (!databaseUrl) {
    tempDir = await mkdtemp(join(tmpdir(), 'paywarden-devnet-'));
    // Absolute, so the operator CLI finds the same file from any working directory.
    databaseUrl = `sqlite:${join(tempDir, 'paywarden.sqlite')}`;
  }
  const removeTemp = async () => {
    if (tempDir) await rm(tempDir, { recursive: true, force: true });
  };

  const explicitPort = env.PORT !== undefined && env.PORT !== '';
  const configFor = (port: string): Config => {
    const host = '127.0.0.1';
    return parseConfig({
      ...env,
      HOST: host,
      PORT: port,
      DATABASE_URL: databaseUrl,
      BASE_RPC_URLS: devnet.rpcUrl,
      FACILITATOR_URL: devnet.facilitatorUrl,
      PAY_TO: payTo,
      PUBLIC_BASE_URL: `http://${host}:${port}`,
      LOG_LEVEL: env.LOG_LEVEL || opts.defaultLogLevel || 'warn',
    });
  };

  let infra: Infrastructure | undefined;
  let app: App | undefined;
  try {
    // Validates the whole environment once before anything is opened.
    let config = configFor(explicitPort ? String(env.PORT) : String(PREFERRED_PORT));
    infra = await openInfrastructure(config);

    // PUBLIC_BASE_URL must name the port before the app is built (catalogue and x402 resource
    // URLs), so the port is chosen first; a port taken in between costs one rebuild.
    let port = explicitPort || (await portIsFree(PREFERRED_PORT)) ? config.port : await freePort();
    for (let attempt = 0; ; attempt++) {
      config = configFor(String(port));
      app = await buildApp({
        ...infra,
        config,
        logger: loggerOptions(config, opts.logStream ?? process.stderr),
      });
      try {
        await app.listen({ host: config.host, port: config.port });
        break;
      } catch (err) {
        await app.close().catch(() => {});
        app = undefined;
        if (explicitPort || attempt >= 2 || !isAddrInUse(err)) throw err;
        port = await freePort();
      }
    }

    const running = app;
    const openInfra = infra;
    let stopping: Promise<void> | undefined;
    return {
      url: config.publicBaseUrl,
      databaseUrl,
      payTo,
      config,
      stop: () =>
        (stopping ??= (async () => {
          try {
            await running.close();
          } finally {
            try {
              await openInfra.close();
            } finally {
              await removeTemp();
            }
          }
        })()),
    };
  } catch (err) {
    await app?.close().catch(() => {});
    await infra?.close().catch(() => {});
    await removeTemp().catch(() => {});
    throw err;
  }
}
