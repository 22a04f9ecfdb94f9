import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';

interface Jiffies { busy: number; total: number }

function read(): Jiffies | undefined {
  try {
    const [user, nice, system, idle, iowait, irq, softirq, steal] = readFileSync('/proc/stat', 'utf8')
      .split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number) as number[];
    const busy = user! + nice! + system! + irq! + softirq!;
    return { busy, total: busy + idle! + iowait! + (steal ?? 0) };
  } catch {
    return undefined;
  }
}

/** Cores busy on the whole machine over the next `ms` milliseconds (Linux; undefined elsewhere). */
export async function busyCores(ms = 1000): Promise<number | undefined> {
  const a = read();
  await new Promise((r) => setTimeout(r, ms));
  const b = read();
  if (!a || !b || b.total <= a.total) return undefined;
  return ((b.busy - a.busy) / (b.total - a.total)) * cpus().length;
}

/**
 * Waits until the machine has been quiet (at most `maxBusyCores` busy) for `quietSec` seconds in a
 * row, or `timeoutSec` passed. Resolves with the busy cores of the last second.
 */
export async function waitForQuiet(opts: { maxBusyCores?: number; quietSec?: number; timeoutSec: number; log?: (s: string) => void }): Promise<number | undefined> {
  const max = opts.maxBusyCores ?? 0.3;
  const need = opts.quietSec ?? 5;
  const deadline = Date.now() + opts.timeoutSec * 1000;
  let quiet = 0;
  let last: number | undefined;
  let said = 0;
  while (Date.now() < deadline) {
    last = await busyCores(1000);
    if (last === undefined) return undefined;
    quiet = last <= max ? quiet + 1 : 0;
    if (quiet >= need) return last;
    if (opts.log && Date.now() - said > 15_000) {
      said = Date.now();
      opts.log(`waiting for a quiet machine: ${last.toFixed(2)} cores busy`);
    }
  }
  return last;
}
