import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ChildMessage, LoadSpec, ParentMessage } from './types.js';

const SERVER_ENTRY = fileURLToPath(new URL('../server.ts', import.meta.url));
/**
 * How long a target may take to start. Storing 1,000,000 decisions before a history run took
 * over 60 s on PostgreSQL on a slow day of this host, so the limit is generous; it only guards
 * against a target that hangs.
 */
const START_TIMEOUT_MS = 300_000;

export interface CpuSample {
  userMicros: number;
  systemMicros: number;
  wallMicros: number;
  /** The server's memory at the same moment. */
  rssBytes?: number;
  heapUsedBytes?: number;
  /** The server's event loop so far (performance.eventLoopUtilization): ms busy and ms waiting for events. */
  loopActiveMs?: number;
  loopIdleMs?: number;
}

export interface StartedTarget {
  name: string;
  pid: number;
  /** http://127.0.0.1:<port> */
  origin: string;
  load: LoadSpec;
  /** The child's cumulative CPU time, to tell how busy the server was during a run. */
  cpu(): Promise<CpuSample>;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** Extra environment of the server process. */
  env?: NodeJS.ProcessEnv;
  /** Extra Node flags of the server process (e.g. --cpu-prof). */
  execArgv?: string[];
  /** Another entry speaking the bench/server.ts protocol (experiments). */
  entry?: string;
  /** Send the server's stdout to /dev/null (e.g. when it logs every request). */
  quiet?: boolean;
}

const live = new Set<ChildProcess>();
// Never leave servers behind, whatever way the parent ends.
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/**
 * Runs bench/server.ts <name> (a name of bench/lib/targets.ts) in its own Node process (tsx loader), so the server never shares an
 * event loop or a core's time slice with the load generator, and resolves once it listens.
 */
export function startTarget(name: string, opts: StartOptions = {}): Promise<StartedTarget> {
  const child = fork(opts.entry ?? SERVER_ENTRY, [name], {
    execArgv: ['--import', 'tsx', ...(opts.execArgv ?? [])],
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', opts.quiet ? 'ignore' : 'inherit', 'inherit', 'ipc'],
  });
  live.add(child);
  child.on('exit', () => live.delete(child));

  let seq = 0;
  const pending = new Map<number, (s: CpuSample) => void>();
  child.on('message', (msg: ChildMessage) => {
    if (msg.type === 'cpu') {
      pending.get(msg.id)?.(msg);
      pending.delete(msg.id);
    }
  });

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`target ${name} did not start within ${START_TIMEOUT_MS} ms`));
    }, START_TIMEOUT_MS);
    const onExit = (code: number | null, signal: string | null) => {
      clearTimeout(timer);
      reject(new Error(`target ${name} exited before it was ready (code ${code}, signal ${signal})`));
    };
    child.once('exit', onExit);
    child.on('message', (msg: ChildMessage) => {
      if (msg.type === 'error') {
        clearTimeout(timer);
        child.off('exit', onExit);
        reject(new Error(`target ${name} failed to start: ${msg.message}`));
      } else if (msg.type === 'ready') {
        clearTimeout(timer);
        child.off('exit', onExit);
        let stopping = false;
        child.on('exit', (code, signal) => {
          if (!stopping) console.error(`bench: target ${name} exited unexpectedly (code ${code}, signal ${signal})`);
        });
        resolve({
          name,
          pid: msg.pid,
          origin: `http://127.0.0.1:${msg.port}`,
          load: msg.load,
          cpu: () =>
            new Promise<CpuSample>((res, rej) => {
              const id = ++seq;
              pending.set(id, res);
              if (!child.send({ type: 'cpu', id } satisfies ParentMessage)) rej(new Error(`target ${name} is gone`));
            }),
          stop: () =>
            new Promise<void>((res) => {
              stopping = true;
              if (child.exitCode !== null || child.signalCode !== null) return res();
              const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
              child.once('exit', () => {
                clearTimeout(kill);
                res();
              });
              child.send({ type: 'stop' } satisfies ParentMessage);
            }),
        });
      }
    });
  });
}
