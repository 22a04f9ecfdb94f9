import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../../src/devnet/index.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface ServiceProcess {
  child: ChildProcess;
  port: number;
  url: string;
  /** Resolves with the exit code once the process has ended. */
  exited: Promise<number | null>;
  /** What it wrote to stdout and stderr so far (with `capture`). */
  out(): string;
  err(): string;
}

/**
 * The service as `npm start` runs it (src/main.ts), in a process of its own on a free port with
 * `env` added to this one's (HOST 127.0.0.1 and PORT set); resolves once /healthz answers.
 * `preload`: modules loaded first (`--import`). `capture`: keep stdout and stderr (else ignored).
 */
export async function startServiceProcess(env: Record<string, string | undefined>, opts: { preload?: string[]; capture?: boolean } = {}): Promise<ServiceProcess> {
  const port = await freePort();
  const output = opts.capture ? 'pipe' : 'ignore';
  const child = spawn(process.execPath, ['--import', 'tsx', ...(opts.preload ?? []).flatMap((m) => ['--import', m]), 'src/main.ts'], {
    env: { ...process.env, HOST: '127.0.0.1', PORT: String(port), ...env },
    stdio: ['ignore', output, output],
  });
  let out = '';
  let err = '';
  child.stdout?.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr?.on('data', (c: Buffer) => (err += c.toString('utf8')));
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; !(await fetch(`${url}/healthz`).then((r) => r.ok, () => false)); i++) {
    if (i > 300 || child.exitCode !== null) {
      child.kill('SIGKILL');
      throw new Error(`the service did not start${err ? `: ${err}` : ''}`);
    }
    await sleep(100);
  }
  return { child, port, url, exited, out: () => out, err: () => err };
}
