import { format } from 'node:util';
import { Worker } from 'node:worker_threads';
import { buildApp } from './app.js';
import { ConfigError, parseConfig, type Config } from './config.js';
import { purgeExpired } from './features/maintenance.js';
import { lockedDatabase, openInfrastructure, warnWhileRedisFails } from './platform/deps.js';
import { redactKeys } from './platform/errors.js';

const PURGE_INTERVAL_MS = 60 * 60 * 1000;
/** How much longer than a paid request's facilitator and chain calls a shutdown waits for open connections. */
const SHUTDOWN_MARGIN_MS = 5_000;
/** How long the exit may spend writing out the log's last lines. */
const EXIT_FLUSH_MS = 5_000;

/**
 * Ends the process `ms` from now, however it is stuck: at exit pino writes its buffered lines
 * synchronously and, while stdout is a pipe nobody reads (a stopped `| less`, a reader that
 * died), retries for ever, blocking the main thread. A worker thread's timer still runs then.
 */
function exitWithin(ms: number): void {
  new Worker(`setTimeout(() => process.kill(process.pid, 'SIGKILL'), ${ms});`, { eval: true }).unref();
}

/** The service's logger once there is one: a crash is logged through it (see onCrash). */
let crashLog: { fatal(obj: object, msg: string): void } | undefined;

/**
 * An exception nothing caught, or a rejection nothing handled (Node raises it as one), ends the
 * process with code 1 as Node would, but logged at fatal through the service's logger, whose
 * serializers keep credentials out. Node's own report printed the error with every member it
 * has: ioredis attaches a refused command with its arguments (an AUTH's are REDIS_URL's
 * password), viem the RPC URL with its API key. Before the logger exists, only the message is
 * printed, as a failed start prints it.
 */
function onCrash(err: unknown, origin: string): void {
  try {
    if (crashLog) crashLog.fatal({ err, origin }, 'crashed: the process ends');
    else console.error(`paywarden: crashed (${origin}): ${redactKeys(err instanceof Error ? err.message : String(err))}`);
  } finally {
    exitWithin(EXIT_FLUSH_MS);
    process.exit(1);
  }
}
process.on('uncaughtException', onCrash);

/**
 * What libraries print with console (the x402 SDK warns there when a facilitator fails, quoting
 * its answer) goes through the service's logger: one JSON line at the matching level like every
 * other, with its credentials left out like every other (see loggerOptions).
 */
function logConsoleThrough(log: Record<'info' | 'warn' | 'error' | 'debug', (obj: object, msg: string) => void>): void {
  const levels = [['log', 'info'], ['info', 'info'], ['warn', 'warn'], ['error', 'error'], ['debug', 'debug']] as const;
  for (const [method, level] of levels) console[method] = (...args: unknown[]) => log[level]({ source: 'console' }, format(...args));
}

const shutdownDeadlineMs = (config: Config) => 2 * config.facilitatorTimeoutMs + config.rpcTimeoutMs + SHUTDOWN_MARGIN_MS;

async function main(): Promise<void> {
  const config = parseConfig();
  const infra = await openInfrastructure(config);
  const app = await buildApp(infra).catch(async (err: unknown) => {
    await infra.close().catch(() => {});
    throw lockedDatabase(err, config) ?? err;
  });
  crashLog = app.log;
  if (!config.rateLimits) app.log.warn('RATE_LIMITS=off: no per-source limit is enforced (meant for benchmarks only)');
  warnWhileRedisFails(infra, app.log);
  infra.database.wal?.onCheckpointerLost((err) =>
    app.log.error({ err }, 'SQLite checkpointer stopped: commits checkpoint the WAL themselves from now on (slower, no data lost)'),
  );

  const purge = async () => {
    try {
      const removed = await purgeExpired(infra.database, infra.clock.now());
      app.log.info({ removed }, 'purged expired data');
    } catch (err) {
      app.log.error({ err }, 'purge failed');
    }
  };
  await purge();
  const timer = setInterval(purge, PURGE_INTERVAL_MS);
  timer.unref();

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ signal }, 'shutting down');
    clearInterval(timer);
    // close() stops accepting connections and waits for in-flight requests to finish; a request
    // that arrives meanwhile on an open connection gets 503 shutting_down. The longest wait a
    // request has by design is a paid report's: its verify, its chain read and its settle, each
    // bounded by its timeout. Past those and a margin, connections still open (a client that
    // stopped sending) are closed, so the process always ends. A paid request cut off even so
    // either charged nothing or had its report stored before its settle began: replaying its
    // PAYMENT-SIGNATURE delivers it, never charging again.
    const deadline = setTimeout(() => app.server.closeAllConnections(), shutdownDeadlineMs(config));
    await app.close();
    clearTimeout(deadline);
    await infra.close();
    exitWithin(EXIT_FLUSH_MS);
    process.exit(0);
  };
  // SIGHUP too: the terminal or ssh session the service was started from went away.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => void stop(signal));

  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    // A HOST that does not resolve, a PORT in use: say which setting, then stop cleanly.
    await app.close().catch(() => {});
    await infra.close().catch(() => {});
    throw new ConfigError(`cannot listen on HOST=${config.host} PORT=${config.port}: ${err instanceof Error ? err.message : String(err)}`);
  }
  // Started: from here on every line is the logger's (a failed start above prints plain text).
  logConsoleThrough(app.log);
}

main().catch((err: unknown) => {
  if (err instanceof ConfigError) {
    console.error(`paywarden: ${err.message}`);
  } else {
    console.error('paywarden: failed to start:', err instanceof Error ? err.message : err);
  }
  process.exit(1);
});
