/**
 * Where the latency of a paced run goes: the client's figures (latency from when each request
 * was due, as `npm run bench:decisions` reports them) next to the server's own (headers parsed to
 * response written) and its event loop's delays, run by run.
 *
 *   npx tsx bench/experiments/latency-split.ts [target=decisions-sqlite] [rate=2800] [rounds=3] [connections=128]
 *
 * A client p99 far above the server's p99 means the requests waited before the server's
 * event loop read them (a held-up loop shows in loopDelayMax) or in the client itself.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTarget } from '../lib/child.js';
import { paced, smokeCheck } from '../lib/load.js';

const [name = 'decisions-sqlite', rateArg = '2800', roundsArg = '3', connArg = '128'] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'paywarden-split-'));
const timingFile = join(dir, 'timing.jsonl');
const t = await startTarget(name, {
  entry: fileURLToPath(new URL('./timed-server.ts', import.meta.url)),
  env: { TIMING_FILE: timingFile },
});
try {
  await smokeCheck(t);
  for (let r = 0; r < Number(roundsArg); r++) {
    const run = await paced(t, Number(rateArg), { connections: Number(connArg) });
    const lines = readFileSync(timingFile, 'utf8').trim().split('\n');
    const server = JSON.parse(lines[lines.length - 1]!);
    console.log(
      JSON.stringify({
        rate: run.requestedRate,
        clientP50: run.latencyMs.p50,
        clientP99: run.latencyMs.p99,
        clientMax: run.latencyMs.max,
        clientCpu: run.clientCpu,
        serverCpu: run.serverCpu,
        otherCpu: run.otherCpu,
        ...server,
      }),
    );
  }
} finally {
  await t.stop();
  rmSync(dir, { recursive: true, force: true });
}
