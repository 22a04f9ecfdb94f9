// Local anvil chain that impersonates Base mainnet (chain id 8453), so that
// everything keyed by chain id (EIP-712 domains, x402 network "eip155:8453",
// viem's `base` chain definition) behaves exactly as in production.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createServer, type Socket } from 'node:net';
import { createPublicClient, createTestClient, createWalletClient, defineChain, http, type Account, type Chain, type Hash } from 'viem';
import { base } from 'viem/chains';

export const BASE_CHAIN_ID = 8453;

export interface StartChainOptions {
  /** Absolute path to an anvil binary; defaults to the one from @foundry-rs/anvil-linux-amd64. */
  anvilPath?: string;
  /** Extra CLI flags appended to anvil's command line. */
  extraArgs?: string[];
  /** The chain id anvil answers; default BASE_CHAIN_ID. Another one stands for a misconfigured RPC URL (tests). */
  chainId?: number;
  /** How long to wait for the RPC to answer before giving up. Default 15 s. */
  readyTimeoutMs?: number;
}

export interface ChainHandle {
  rpcUrl: string;
  stop(): Promise<void>;
}

/** viem's Base chain pointed at a local RPC: keeps Base's formatters and the Multicall3 address. */
export function baseDevnetChain(rpcUrl: string): Chain {
  return defineChain({ ...base, rpcUrls: { default: { http: [rpcUrl] } } });
}

/**
 * The viem clients devnet set-up code uses against `rpcUrl`, and `mined`, which waits for a
 * transaction and throws, naming `what` was being set up, when it reverted.
 */
export function devnetClients(rpcUrl: string, what: string, opts: { pollingInterval?: number } = {}) {
  const chain = baseDevnetChain(rpcUrl);
  const transport = http(rpcUrl);
  const polling = opts.pollingInterval ? { pollingInterval: opts.pollingInterval } : {};
  const pub = createPublicClient({ chain, transport, ...polling });
  const test = createTestClient({ mode: 'anvil', chain, transport });
  const walletOf = (account: Account) => createWalletClient({ account, chain, transport });
  const mined = async (hash: Hash) => {
    const receipt = await pub.waitForTransactionReceipt({ hash, ...polling });
    if (receipt.status !== 'success') throw new Error(`${what} tx ${hash} reverted`);
    return receipt;
  };
  return { chain, transport, pub, test, walletOf, mined };
}

function defaultAnvilPath(): string {
  // The package has no "main", so resolve its package.json and walk to bin/.
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('@foundry-rs/anvil-linux-amd64/package.json')), 'bin', 'anvil');
}

/** Asks the kernel for an unused port. There is a small race until anvil binds it; startChain retries. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? resolve(port) : reject(new Error('could not allocate a port'))));
    });
  });
}

// anvil runs under a tiny sh supervisor that holds our stdin pipe. If this Node
// process dies in any way (even SIGKILL, which skips 'exit' handlers) the pipe
// closes, `cat` returns and the supervisor kills anvil, so no orphan keeps a port.
// The supervisor prints anvil's pid first so we can also signal anvil directly.
const SUPERVISOR = [
  'exec 3<&0',
  '"$0" "$@" 3<&- </dev/null &',
  'pid=$!',
  'echo "$pid"',
  '(cat <&3 >/dev/null; kill "$pid" 2>/dev/null) &',
  'wait "$pid"',
].join('\n');

async function rpcAnswers(rpcUrl: string): Promise<boolean> {
  try {
    const res = await fetch(rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
      signal: AbortSignal.timeout(1000),
    });
    return res.ok;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Launched {
  child: ChildProcessWithoutNullStreams;
  anvilPid: Promise<number>;
  exited: Promise<void>;
  stderr: () => string;
  unref: () => void;
}

function launch(anvilPath: string, args: string[]): Launched {
  const child = spawn('/bin/sh', ['-c', SUPERVISOR, anvilPath, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  let err = '';
  child.stderr.on('data', (d: Buffer) => {
    err = (err + d.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const anvilPid = new Promise<number>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(Number(out.slice(0, nl)));
    });
    void exited.then(() => reject(new Error(`anvil supervisor exited early: ${err}`)));
  });
  anvilPid.catch(() => {}); // observed by callers; avoid unhandled rejection noise
  child.stdin.on('error', () => {});
  // Once the supervisor is gone, release the watcher `cat` that still reads our pipe.
  void exited.then(() => child.stdin.destroy());
  // Unref process and pipes (once it is up) so a forgotten devnet never keeps the event
  // loop, and thus a test run, alive; the 'exit' hook and the supervisor still stop anvil.
  const unref = () => {
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr]) (s as unknown as Socket).unref();
  };
  return { child, anvilPid, exited, stderr: () => err, unref };
}

export async function startChain(opts: StartChainOptions = {}): Promise<ChainHandle> {
  const anvilPath = opts.anvilPath ?? defaultAnvilPath();
  const readyTimeoutMs = opts.readyTimeoutMs ?? 15_000;
  let lastError = '';

  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const rpcUrl = `http://127.0.0.1:${port}`;
    const args = ['--host', '127.0.0.1', '--port', String(port), '--chain-id', String(opts.chainId ?? BASE_CHAIN_ID), '--silent'];
    const l = launch(anvilPath, [...args, ...(opts.extraArgs ?? [])]);
    let dead = false;
    void l.exited.then(() => (dead = true));

    let pid = 0;
    // Synchronous last resort for normal exits (process.exit, end of event loop).
    const onExit = () => {
      if (pid) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
    };
    process.once('exit', onExit);

    const stop = async () => {
      process.removeListener('exit', onExit);
      if (dead) return;
      // Closing the pipe makes the supervisor kill anvil (SIGTERM) and exit.
      l.child.stdin.end();
      const timer = setTimeout(onExit, 3000);
      await l.exited;
      clearTimeout(timer);
    };

    try {
      pid = await l.anvilPid;
      const deadline = Date.now() + readyTimeoutMs;
      while (!dead && Date.now() < deadline) {
        if (await rpcAnswers(rpcUrl)) {
          l.unref();
          return { rpcUrl, stop };
        }
        await sleep(50);
      }
      lastError = dead ? `anvil exited: ${l.stderr()}` : `anvil did not answer within ${readyTimeoutMs} ms`;
    } catch (e) {
      lastError = e instanceof Error ? e.message : String(e);
    }
    const diedOnItsOwn = dead;
    await stop();
    // A port race shows up as anvil exiting at once; anything else is not worth retrying.
    if (!diedOnItsOwn || !/address|in use|bind/i.test(lastError)) break;
  }
  throw new Error(`startChain failed: ${lastError}`);
}
