/**
 * The disk's own floor under issue 3's latency target: what a durable group commit would answer
 * at a given rate if it cost no CPU at all.
 *
 *   npx tsx bench/experiments/fsync-floor.ts [rate=2700] [seconds=10] [rounds=3]
 *
 * Requests are due at a steady rate (start + i/rate, like `paced`). A single writer takes every
 * request due so far, writes 600 bytes per request at the next place of a preallocated 16 MiB
 * file on the main thread (as SQLite writes WAL frames: the same file overwritten from its
 * start once full), then fdatasyncs it on libuv's thread pool (as WalSync does) and answers the
 * batch; requests due meanwhile wait for the next sync. A request's latency runs from when it
 * was due to the end of the sync that covers it. Nothing else runs: no HTTP, no SQL, no
 * signatures, no checkpoints. So its p99 is a lower bound on the p99 of any server on this disk
 * that acknowledges a write only once it is durable, at that rate.
 *
 * The file is in the same directory as the benchmark's SQLite databases (os.tmpdir()).
 */
import { closeSync, fdatasync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { promisify } from 'node:util';
import { busyCores } from '../lib/machine.js';
import { median, percentileSorted, round } from '../lib/stats.js';

const rate = Number(process.argv[2] ?? 2700);
const seconds = Number(process.argv[3] ?? 10);
const rounds = Number(process.argv[4] ?? 3);
const FILE_BYTES = 16 * 1024 * 1024;
const BYTES_PER_REQUEST = Number(process.env.FSYNC_BYTES ?? 600);
const datasync = promisify(fdatasync);

interface RoundResult {
  requests: number;
  syncs: number;
  requestP50: number;
  requestP99: number;
  requestMax: number;
  syncP50: number;
  syncP99: number;
  syncMax: number;
  syncsOver10ms: number;
  otherCpu: number | undefined;
}

const ms = (ns: bigint) => Number(ns) / 1e6;
const sortedCopy = (v: number[]) => Float64Array.from(v).sort();

async function oneRound(path: string): Promise<RoundResult> {
  const fd = openSync(path, 'r+');
  const latencies: number[] = [];
  const syncTimes: number[] = [];
  const total = Math.round(rate * seconds);
  const stepNs = BigInt(Math.round(1e9 / rate));
  const chunk = Buffer.alloc(BYTES_PER_REQUEST * 512, 0x5a);
  let offset = 0;
  let next = 0; // the next request not yet taken by a batch
  const cpu = busyCores(seconds * 1000);
  const start = process.hrtime.bigint();
  try {
    while (next < total) {
      const now = process.hrtime.bigint();
      const due = Math.min(total, Number((now - start) / stepNs) + 1);
      if (due <= next) {
        await nextTurn();
        continue;
      }
      const batch = due - next;
      let bytes = batch * BYTES_PER_REQUEST;
      while (bytes > 0) {
        if (offset >= FILE_BYTES) offset = 0;
        const n = Math.min(bytes, chunk.length, FILE_BYTES - offset);
        writeSync(fd, chunk, 0, n, offset);
        offset += n;
        bytes -= n;
      }
      const syncStart = process.hrtime.bigint();
      await datasync(fd);
      const done = process.hrtime.bigint();
      syncTimes.push(ms(done - syncStart));
      for (let i = next; i < due; i++) latencies.push(ms(done - (start + BigInt(i) * stepNs)));
      next = due;
    }
  } finally {
    closeSync(fd);
  }
  const lat = sortedCopy(latencies);
  const syn = sortedCopy(syncTimes);
  return {
    requests: lat.length,
    syncs: syn.length,
    requestP50: round(percentileSorted(lat, 50)),
    requestP99: round(percentileSorted(lat, 99)),
    requestMax: round(lat[lat.length - 1]!),
    syncP50: round(percentileSorted(syn, 50)),
    syncP99: round(percentileSorted(syn, 99)),
    syncMax: round(syn[syn.length - 1]!),
    syncsOver10ms: syncTimes.filter((t) => t > 10).length,
    otherCpu: await cpu.then((c) => (c === undefined ? undefined : round(Math.max(0, c - 1)))),
  };
}

const dir = mkdtempSync(join(tmpdir(), 'paywarden-fsync-'));
const path = join(dir, 'wal');
try {
  const fd = openSync(path, 'w');
  writeSync(fd, Buffer.alloc(FILE_BYTES));
  await datasync(fd);
  closeSync(fd);
  const results: RoundResult[] = [];
  for (let r = 0; r < rounds; r++) {
    const res = await oneRound(path);
    results.push(res);
    console.log(`round ${r + 1}: ${JSON.stringify(res)}`);
  }
  const med = (k: keyof RoundResult) => median(results.map((r) => r[k] as number));
  console.log(
    `\n${rate} requests/s, ${seconds} s x ${rounds} rounds, ${tmpdir()}: median request p50 ${med('requestP50')} ms, ` +
      `p99 ${med('requestP99')} ms; sync p50 ${med('syncP50')} ms, p99 ${med('syncP99')} ms, ` +
      `max ${med('syncMax')} ms; syncs over 10 ms per round ${med('syncsOver10ms')} of ${med('syncs')}`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
