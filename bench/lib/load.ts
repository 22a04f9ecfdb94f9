import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { Agent, request as httpRequest } from 'node:http';
import { performance } from 'node:perf_hooks';
import autocannon, { type AutocannonOptions, type AutocannonResult } from 'autocannon';
import type { StartedTarget } from './child.js';
import { percentileSorted, round } from './stats.js';

export interface LoadOptions {
  connections: number;
  pipelining: number;
  /** Measured seconds. */
  durationSec: number;
  /** Seconds of the same load before measuring (not counted), 0 for none. */
  warmupSec: number;
}

export const SATURATION_DEFAULTS: LoadOptions = { connections: 32, pipelining: 1, durationSec: 5, warmupSec: 1 };

export interface LatencySummary {
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

export interface RunResult {
  target: string;
  kind: 'saturation' | 'rate';
  connections: number;
  pipelining: number;
  /** overallRate asked of autocannon (rate runs only). */
  requestedRate?: number;
  durationSec: number;
  /** Responses with the expected status per second of measured time. */
  rps: number;
  responses: number;
  /** Exact percentiles (ms) of every response's time, from autocannon's per-response events. */
  latencyMs: LatencySummary;
  /** autocannon's own figures (ms; its histogram has 1 ms resolution); autocannon runs only. */
  autocannonLatencyMs?: { p50: number; p99: number };
  statusCodes: Record<string, number>;
  errors: number;
  timeouts: number;
  /** Busy fraction of one core, server process and load generator, over the measured time. */
  serverCpu: number;
  clientCpu: number;
  /**
   * Busy fraction of the server's event loop (its main thread) over the run. serverCpu also
   * counts its worker threads and the thread pool; this is the capacity that runs out first.
   */
  serverLoopBusy?: number;
  /**
   * Server CPU time per response (µs): what one request costs the server, far less sensitive to
   * other load on the machine than requests per second.
   */
  serverMicrosPerRequest: number;
  /**
   * Cores busy with anything else on the machine over the measured time (other processes, the
   * kernel's network work not charged to either process), and cores stolen by the hypervisor,
   * from /proc/stat. On a 2-core machine a run with otherCpu well above ~0.3 was disturbed.
   */
  otherCpu?: number;
  stealCpu?: number;
}

interface SystemCpu {
  busy: number;
  total: number;
  steal: number;
}

/** Aggregate CPU jiffies from /proc/stat (Linux only; undefined elsewhere). */
function systemCpu(): SystemCpu | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number) as number[];
    const busy = user! + nice! + system! + irq! + softirq!;
    return { busy, total: busy + idle! + iowait! + steal!, steal: steal! };
  } catch {
    return undefined;
  }
}

export class BenchmarkFailure extends Error {
  override name = 'BenchmarkFailure';
}

function baseOptions(target: StartedTarget, o: LoadOptions): AutocannonOptions {
  return {
    url: target.origin,
    requests: target.load.requests.map((r) => ({ ...r })),
    connections: o.connections,
    pipelining: o.pipelining,
    timeout: 10,
    renderProgressBar: false,
    renderResultsTable: false,
    renderLatencyTable: false,
    // `[<id>]` in a body becomes a fresh id per request (unique requestIds for durable writes).
    ...(target.load.idReplacement ? { idReplacement: true } : {}),
  };
}

/** Fails loudly unless every response had the target's expected status and nothing failed. */
export function assertAllExpected(target: StartedTarget, result: AutocannonResult, label: string): void {
  const expect = target.load.expectStatus ?? 200;
  const unexpected = Object.entries(result.statusCodeStats).filter(([code]) => Number(code) !== expect);
  const problems: string[] = [];
  if (unexpected.length) problems.push(`unexpected statuses ${unexpected.map(([c, { count }]) => `${c}×${count}`).join(', ')}`);
  if (expect >= 200 && expect < 300 && result.non2xx) problems.push(`non2xx=${result.non2xx}`);
  if (result.errors) problems.push(`errors=${result.errors}`);
  if (result.timeouts) problems.push(`timeouts=${result.timeouts}`);
  if (result.mismatches) problems.push(`mismatches=${result.mismatches}`);
  if (!result['2xx'] && expect < 300) problems.push('no 2xx response at all');
  if (problems.length) {
    throw new BenchmarkFailure(`${target.name} ${label}: every response must be ${expect}, but: ${problems.join('; ')}`);
  }
}

/** One request with fetch before any load: the expected status and body, or a loud failure. */
export async function smokeCheck(target: StartedTarget): Promise<string> {
  const req = target.load.requests[0];
  if (!req) throw new BenchmarkFailure(`${target.name}: its load has no request`);
  const res = await fetch(target.origin + req.path, {
    method: req.method,
    ...(req.headers ? { headers: req.headers } : {}),
    ...(req.body !== undefined ? { body: req.body } : {}),
  });
  const text = await res.text();
  const expect = target.load.expectStatus ?? 200;
  if (res.status !== expect) throw new BenchmarkFailure(`${target.name} smoke check: status ${res.status} (expected ${expect}): ${text.slice(0, 500)}`);
  if (target.load.expectBodyIncludes && !text.includes(target.load.expectBodyIncludes)) {
    throw new BenchmarkFailure(`${target.name} smoke check: body lacks ${target.load.expectBodyIncludes}: ${text.slice(0, 500)}`);
  }
  return text;
}

/** Raw outcome of one measured load run, before the meters are read. */
interface LoadOutcome {
  latencies: Float64Array;
  responses: number;
  durationSec: number;
  connections: number;
  pipelining: number;
  statusCodes: Record<string, number>;
  errors: number;
  timeouts: number;
  autocannonLatencyMs?: { p50: number; p99: number };
}

/**
 * Runs `load` between CPU readings of the server, the load generator and the machine, and
 * summarizes it: exact latency percentiles, req/s, CPU per request.
 */
async function metered(
  target: StartedTarget,
  kind: RunResult['kind'],
  requestedRate: number | undefined,
  load: () => Promise<LoadOutcome>,
): Promise<RunResult> {
  const serverBefore = await target.cpu();
  const systemBefore = systemCpu();
  const clientBefore = process.cpuUsage();
  const wallBefore = process.hrtime.bigint();
  const out = await load();
  const wallMicros = Number((process.hrtime.bigint() - wallBefore) / 1000n);
  const client = process.cpuUsage(clientBefore);
  const systemAfter = systemCpu();
  const serverAfter = await target.cpu();

  const n = out.latencies.length;
  const sorted = out.latencies.sort();
  let sum = 0;
  for (const v of sorted) sum += v;
  const serverMicros = serverAfter.userMicros + serverAfter.systemMicros - serverBefore.userMicros - serverBefore.systemMicros;
  const serverWall = serverAfter.wallMicros - serverBefore.wallMicros;
  const serverCpu = serverMicros / serverWall;
  const clientCpu = (client.user + client.system) / wallMicros;
  const loopActive = (serverAfter.loopActiveMs ?? NaN) - (serverBefore.loopActiveMs ?? NaN);
  const loopTotal = loopActive + (serverAfter.loopIdleMs ?? NaN) - (serverBefore.loopIdleMs ?? NaN);
  let machine: { otherCpu: number; stealCpu: number } | undefined;
  if (systemBefore && systemAfter && systemAfter.total > systemBefore.total) {
    const cores = cpus().length;
    const total = systemAfter.total - systemBefore.total;
    const busyCores = ((systemAfter.busy - systemBefore.busy) / total) * cores;
    machine = {
      otherCpu: round(Math.max(0, busyCores - serverCpu - clientCpu), 2),
      stealCpu: round(((systemAfter.steal - systemBefore.steal) / total) * cores, 2),
    };
  }
  return {
    target: target.name,
    kind,
    connections: out.connections,
    pipelining: out.pipelining,
    ...(requestedRate ? { requestedRate } : {}),
    durationSec: out.durationSec,
    rps: round(out.responses / out.durationSec, 0),
    responses: out.responses,
    latencyMs: {
      p50: round(percentileSorted(sorted, 50), 3),
      p90: round(percentileSorted(sorted, 90), 3),
      p99: round(percentileSorted(sorted, 99), 3),
      p999: round(percentileSorted(sorted, 99.9), 3),
      max: round(sorted[n - 1] ?? NaN, 3),
      mean: round(sum / n, 3),
    },
    ...(out.autocannonLatencyMs ? { autocannonLatencyMs: out.autocannonLatencyMs } : {}),
    statusCodes: out.statusCodes,
    errors: out.errors,
    timeouts: out.timeouts,
    serverCpu: round(serverCpu, 2),
    serverMicrosPerRequest: round(serverMicros / Math.max(1, n), 1),
    clientCpu: round(clientCpu, 2),
    ...(loopTotal > 0 ? { serverLoopBusy: round(loopActive / loopTotal, 2) } : {}),
    ...machine,
  };
}

async function measure(
  target: StartedTarget,
  kind: RunResult['kind'],
  o: LoadOptions,
  extra: Partial<AutocannonOptions>,
): Promise<RunResult> {
  const opts = { ...baseOptions(target, o), ...extra };
  if (o.warmupSec > 0) {
    const warm = await autocannon({ ...opts, duration: o.warmupSec });
    assertAllExpected(target, warm, `${kind} warm-up`);
  }
  return metered(target, kind, extra.overallRate, async () => {
    let latencies = new Float64Array(1 << 16);
    let n = 0;
    const instance = autocannon({ ...opts, duration: o.durationSec });
    instance.on('response', (_client: unknown, _status: number, _bytes: number, ms: number) => {
      if (n === latencies.length) {
        const grown = new Float64Array(latencies.length * 2);
        grown.set(latencies);
        latencies = grown;
      }
      latencies[n++] = ms;
    });
    const result = await instance;
    assertAllExpected(target, result, kind);
    const expect = String(target.load.expectStatus ?? 200);
    return {
      latencies: latencies.subarray(0, n),
      responses: result.statusCodeStats[expect]?.count ?? 0,
      durationSec: result.duration,
      connections: result.connections,
      pipelining: result.pipelining,
      statusCodes: Object.fromEntries(Object.entries(result.statusCodeStats).map(([c, { count }]) => [c, count])),
      errors: result.errors,
      timeouts: result.timeouts,
      autocannonLatencyMs: { p50: result.latency.p50, p99: result.latency.p99 },
    };
  });
}

/** Closed-loop saturation: `connections` connections each with `pipelining` requests in flight. */
export function saturate(target: StartedTarget, o: Partial<LoadOptions> = {}): Promise<RunResult> {
  return measure(target, 'saturation', { ...SATURATION_DEFAULTS, ...o }, {});
}

/**
 * A fixed overall request rate (autocannon overallRate, shared among the connections). Note
 * that autocannon paces per second: each connection sends its share of the second's requests
 * back to back, then waits for the next second, so the load comes in bursts whose concurrency
 * is the connection count.
 */
export function atRate(target: StartedTarget, rate: number, o: Partial<LoadOptions> = {}): Promise<RunResult> {
  return measure(target, 'rate', { ...SATURATION_DEFAULTS, ...o }, { overallRate: Math.max(1, Math.round(rate)) });
}

/**
 * Open-loop load at a steady `rate`: request i is due at start + i/rate, whatever happened to the
 * earlier ones, over at most `connections` keep-alive connections, and its latency counts from
 * when it was due (so a stalled server is charged for the requests it kept waiting: no
 * coordinated omission). This is what "latency at half of saturation" means for a server that
 * gets independent requests. autocannon's overallRate is not: each connection sends its share of
 * the second back to back and then waits for the next second, so its "half rate" runs measure
 * saturated bursts.
 */
export function paced(target: StartedTarget, rate: number, o: Partial<LoadOptions> = {}): Promise<RunResult> {
  const opts = { ...SATURATION_DEFAULTS, connections: 10, ...o };
  const url = new URL(target.origin);
  const agent = new Agent({ keepAlive: true, maxSockets: opts.connections });
  const reqs = target.load.requests;
  const expect = target.load.expectStatus ?? 200;
  let seq = 0;
  const runTag = Math.random().toString(36).slice(2, 8);

  function once(i: number): Promise<number> {
    const r = reqs[i % reqs.length]!;
    const body = r.body === undefined ? undefined : target.load.idReplacement ? r.body.replaceAll('[<id>]', `${runTag}-${seq++}`) : r.body;
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        { host: url.hostname, port: url.port, path: r.path, method: r.method, headers: { ...r.headers, ...(body !== undefined ? { 'content-length': Buffer.byteLength(body) } : {}) }, agent },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', reject);
        },
      );
      req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
      req.on('error', reject);
      req.end(body);
    });
  }

  async function run(seconds: number, record: boolean) {
    const total = Math.max(1, Math.round(rate * seconds));
    const interval = 1000 / rate;
    const latencies = new Float64Array(record ? total : 0);
    const statusCodes: Record<string, number> = {};
    let errors = 0;
    let done = 0;
    let sent = 0;
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      const finishOne = () => {
        if (++done === total) resolve();
      };
      const tick = () => {
        const due = Math.min(total, Math.floor((performance.now() - t0) / interval) + 1);
        while (sent < due) {
          const i = sent++;
          const dueAt = t0 + i * interval;
          once(i).then(
            (status) => {
              if (record) latencies[i] = performance.now() - dueAt;
              statusCodes[status] = (statusCodes[status] ?? 0) + 1;
              finishOne();
            },
            () => {
              errors++;
              finishOne();
            },
          );
        }
        if (sent < total) setTimeout(tick, Math.max(0, t0 + sent * interval - performance.now()));
      };
      tick();
    });
    const unexpected = Object.entries(statusCodes).filter(([c]) => Number(c) !== expect);
    if (unexpected.length || errors) {
      throw new BenchmarkFailure(`${target.name} paced run: every response must be ${expect}, but: ${unexpected.map(([c, n]) => `${c}×${n}`).join(', ')}${errors ? ` errors=${errors}` : ''}`);
    }
    return { latencies, statusCodes, responses: statusCodes[expect] ?? 0, total };
  }

  const requestedRate = Math.max(1, Math.round(rate));
  return (async () => {
    try {
      if (opts.warmupSec > 0) await run(opts.warmupSec, false);
      return await metered(target, 'rate', requestedRate, async () => {
        const r = await run(opts.durationSec, true);
        return {
          latencies: r.latencies,
          responses: r.responses,
          durationSec: opts.durationSec,
          connections: opts.connections,
          pipelining: 1,
          statusCodes: r.statusCodes,
          errors: 0,
          timeouts: 0,
        };
      });
    } finally {
      agent.destroy();
    }
  })();
}
