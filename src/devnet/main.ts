// Entry point for `npm run devnet`: anvil (chain 8453) + real USDC + x402 facilitator + the
// paywarden service configured against them, all on loopback. stdout carries exactly one line,
// `devnet ready {json}`, for scripts to parse; everything for humans goes to stderr.
import { BASE_NETWORK, FACILITATOR_ACCOUNT_INDEX, startDevnet, type Devnet } from './index.js';
import { startMarketStub, type MarketStub } from './market-stub.js';
import { PAY_TO_ACCOUNT_INDEX, startService, type ServiceHandle } from './service.js';
import { zooMarketFixtures } from './zoo-market.js';

let devnet: Devnet | undefined;
let market: MarketStub | undefined;
let service: ServiceHandle | undefined;
let signalled: NodeJS.Signals | undefined;
let stopping: Promise<void> | undefined;

async function start(): Promise<void> {
  devnet = await startDevnet({ zoo: true });
  market = await startMarketStub({ tokens: zooMarketFixtures(devnet.zoo!) });
  const env = { ...process.env, MARKET_DEXSCREENER_URL: market.dexscreenerUrl, MARKET_GECKOTERMINAL_URL: market.geckoterminalUrl };
  if (!signalled) service = await startService(devnet, { env });
}
const starting = start();

// Service first (it finishes in-flight requests, which may still be settling on the chain),
// then facilitator and anvil. A signal during startup waits for startup to settle, so that
// nothing half-started (and no temporary database) is left behind.
const stopAll = () =>
  (stopping ??= (async () => {
    await starting.catch(() => {});
    try {
      await service?.stop();
    } finally {
      await market?.stop();
      await devnet?.stop();
    }
  })());

const exitAfterStop = (code: number) =>
  stopAll().then(
    () => process.exit(code),
    (e: unknown) => {
      console.error('devnet: stop failed:', e);
      process.exit(1);
    },
  );

/**
 * One Ctrl-C can arrive more than once: the terminal signals the whole process group (npm and
 * this process), and npm passes it on as well. Copies within a second are that one request.
 */
const DUPLICATE_SIGNAL_MS = 1_000;
let signalledAt = 0;
const onSignal = (signal: NodeJS.Signals) => {
  if (signalled) {
    if (Date.now() - signalledAt < DUPLICATE_SIGNAL_MS) return;
    // A second Ctrl-C means "now": anvil's supervisor and exit hook still take anvil down.
    console.error(`\n${signal} again: exiting without waiting`);
    process.exit(1);
  }
  signalled = signal;
  signalledAt = Date.now();
  console.error(`\n${signal}: stopping service, facilitator and anvil`);
  void exitAfterStop(0);
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
// A closed terminal or ssh session: stop as for Ctrl-C, so the temporary database goes too.
process.on('SIGHUP', onSignal);
// The service logs to stderr: a reader that went away (`2>&1 | grep -m1 ready`) must not crash
// the devnet, and so leave its temporary database behind. The lines are dropped.
process.stderr.on('error', () => {});

try {
  await starting;
} catch (err) {
  console.error(`devnet: failed to start: ${err instanceof Error ? err.message : String(err)}`);
  await exitAfterStop(1);
}

// A signal during startup already began stopping; the handler exits once that is done.
if (devnet && service && !signalled) {
  const payTo = service.payTo;
  const role = (i: number) => (i === PAY_TO_ACCOUNT_INDEX ? 'payTo' : i === FACILITATOR_ACCOUNT_INDEX ? 'facilitator' : 'payer');
  const ready = {
    service: service.url,
    rpc: devnet.rpcUrl,
    facilitator: devnet.facilitatorUrl,
    // Stand-in for DexScreener and GeckoTerminal (their real response shapes) for the zoo tokens.
    market: market ? { url: market.url, dexscreener: market.dexscreenerUrl, geckoterminal: market.geckoterminalUrl } : null,
    // The token zoo: one test token per behaviour, with Uniswap v2 pools (no-liquidity has none).
    tokens: devnet.zoo?.tokens ?? {},
    chainId: 8453,
    network: BASE_NETWORK,
    usdc: devnet.usdcAddress,
    payTo,
    // anvil's default mnemonic: these keys are public. Test-only, never on a real network.
    accounts: devnet.accounts.map((a, index) => ({ index, address: a.address, privateKey: a.privateKey, role: role(index), testOnly: true })),
    env: { DATABASE_URL: service.databaseUrl },
  };
  process.stdout.write(`devnet ready ${JSON.stringify(ready)}\n`);

  const payer = devnet.accounts[1]!;
  console.error(
    [
      '',
      `  service      ${service.url}   (try: curl -i ${service.url}/api/quick-check)`,
      `  rpc          ${devnet.rpcUrl}   (chain id 8453, real FiatTokenV2_2 USDC at ${devnet.usdcAddress})`,
      `  facilitator  ${devnet.facilitatorUrl}`,
      `  payTo        ${payTo}   (account ${PAY_TO_ACCOUNT_INDEX}; account ${FACILITATOR_ACCOUNT_INDEX} signs settlements)`,
      `  payer        ${payer.address}   (account 1; accounts 0-9 each hold 1,000 USDC)`,
      `  operator CLI DATABASE_URL=${service.databaseUrl} npx paywarden policy show sgp_…`,
      '',
      '  The account keys are anvil\'s public test keys: never use them on a real network.',
      '  The database is temporary and removed on exit. Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );
}
