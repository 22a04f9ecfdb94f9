/**
 * Child entry of latency-split.ts: node --import tsx bench/experiments/timed-server.ts <target>.
 * Serves a target of bench/lib/targets.ts exactly as bench/server.ts does, and also times every
 * request inside the server (from Node's `http.server.request.start` to
 * `http.server.response.finish` diagnostics channels: headers parsed to response written) and the
 * event loop's delays (monitorEventLoopDelay, 1 ms resolution). The runner's CPU probes before
 * and after each run mark the windows: at each probe the window's figures are appended to
 * $TIMING_FILE as one JSON line, and the window starts over.
 */
import { subscribe } from 'node:diagnostics_channel';
import { appendFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { serveTarget } from '../lib/serve.js';
import { percentileSorted, round } from '../lib/stats.js';
import { isTargetName, TARGETS } from '../lib/targets.js';

const file = process.env.TIMING_FILE;
if (!file) throw new Error('TIMING_FILE: where to write the windows');
const started = new WeakMap<object, bigint>();
let times: number[] = [];
subscribe('http.server.request.start', (m) => started.set((m as { request: object }).request, process.hrtime.bigint()));
subscribe('http.server.response.finish', (m) => {
  const t0 = started.get((m as { request: object }).request);
  if (t0 !== undefined) times.push(Number(process.hrtime.bigint() - t0) / 1e6);
});
const delay = monitorEventLoopDelay({ resolution: 1 });
delay.enable();

/**
 * Figures a temporarily instrumented service leaves in globalThis.__timing (lists of ms per
 * phase), as p50/p99/max; nothing when the service is not instrumented.
 */
function phases(): Record<string, string> {
  const t = (globalThis as { __timing?: Record<string, number[]> }).__timing;
  if (!t) return {};
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(t)) {
    const s = Float64Array.from(v).sort();
    out[k] = `n=${s.length} p50=${round(percentileSorted(s, 50), 2)} p99=${round(percentileSorted(s, 99), 2)} max=${round(s[s.length - 1] ?? NaN, 2)}`;
    v.length = 0;
  }
  return out;
}

process.on('message', (msg: { type?: string }) => {
  if (msg?.type !== 'cpu') return;
  const sorted = Float64Array.from(times).sort();
  appendFileSync(
    file,
    JSON.stringify({
      requests: sorted.length,
      serverP50: round(percentileSorted(sorted, 50), 3),
      serverP99: round(percentileSorted(sorted, 99), 3),
      serverMax: round(sorted[sorted.length - 1] ?? NaN, 3),
      // Delays beyond the 1 ms resolution: how long the loop was held up.
      loopDelayP99: round(delay.percentile(99) / 1e6 - 1, 3),
      loopDelayMax: round(delay.max / 1e6 - 1, 3),
      ...phases(),
    }) + '\n',
  );
  times = [];
  delay.reset();
});

const name = process.argv[2] ?? '';
await serveTarget(name, async () => {
  if (!isTargetName(name)) throw new Error(`unknown target "${name}"`);
  return TARGETS[name]();
});
