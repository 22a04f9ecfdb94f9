// Shared set-up of the devnet tests of the free token tools (token-tools, zoo-tools): anvil as
// Base, the market-data stub, and the service reading both.
import { randomBytes } from 'node:crypto';
import { buildApp, type App } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { startDevnet, type Devnet } from '../../src/devnet/index.js';
import { startMarketStub, type MarketFixture, type MarketStub } from '../../src/devnet/market-stub.js';
import { ManualClock } from '../../src/platform/clock.js';
import { createRateLimiter } from '../../src/platform/rate-limit.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

export interface ToolsStack {
  devnet: Devnet;
  stub: MarketStub;
  app: App;
  close(): Promise<void>;
}

export interface ToolsStackOptions {
  /** Also deploy the token zoo on the devnet. */
  zoo?: boolean;
  /** The tokens the market-data stub knows, given the started devnet. */
  tokens: (devnet: Devnet) => Record<string, MarketFixture>;
  clock?: ManualClock;
}

/**
 * Starts anvil (with the token zoo when asked), the market-data stub serving `tokens`, and the
 * service on a fresh database, built from configuration alone as src/main.ts builds it (no
 * injected market or chain), so its Base reads are real reads of the devnet.
 */
export async function startToolsStack(opts: ToolsStackOptions): Promise<ToolsStack> {
  let devnet: Devnet | undefined;
  let stub: MarketStub | undefined;
  let database: TestDatabase | undefined;
  let app: App | undefined;
  const close = async () => {
    await app?.close();
    await database?.drop();
    await stub?.stop();
    await devnet?.stop();
  };
  try {
    devnet = await startDevnet(opts.zoo ? { zoo: true } : {});
    stub = await startMarketStub({ tokens: opts.tokens(devnet) });
    const config = testConfig({
      rateLimits: false,
      logLevel: 'silent',
      rpcUrls: [devnet.rpcUrl],
      marketDexscreenerUrl: stub.dexscreenerUrl,
      marketGeckoterminalUrl: stub.geckoterminalUrl,
    });
    database = await createTestDatabase();
    const limiter = createRateLimiter(config, { keyPrefix: `t${randomBytes(4).toString('hex')}` });
    app = await buildApp({ config, database, clock: opts.clock ?? new ManualClock(), limiter, logger: false });
    await app.ready();
    return { devnet, stub, app, close };
  } catch (err) {
    await close().catch(() => {});
    throw err;
  }
}
