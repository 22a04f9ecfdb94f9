/** Syscalls per request of a target under saturation (strace -c): npx tsx bench/experiments/syscalls.ts <target> */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { startTarget } from '../lib/child.js';
import { saturate, smokeCheck } from '../lib/load.js';

const name = process.argv[2] ?? 'evaluate';
const out = `/tmp/paywarden-strace-${name}.txt`;
const t = await startTarget(name);
try {
  await smokeCheck(t);
  await saturate(t, { durationSec: 2, warmupSec: 1 });
  const st = spawn('strace', ['-c', '-f', '-p', String(t.pid), '-o', out]);
  await new Promise((r) => setTimeout(r, 500));
  const r = await saturate(t, { durationSec: 3, warmupSec: 0 });
  st.kill('SIGINT');
  await new Promise((r) => st.on('exit', r));
  console.log(`${name}: ${r.responses} responses`);
  for (const line of readFileSync(out, 'utf8').split('\n')) {
    const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$/.exec(line);
    if (m) console.log(`  ${m[2]!.padEnd(16)} ${(Number(m[1]) / r.responses).toFixed(3)} per request`);
  }
} finally {
  await t.stop();
}
