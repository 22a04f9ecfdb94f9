/** CPU a target's server uses while it serves nothing (background timers, pollers): npx tsx bench/experiments/idle-cpu.ts [target] [seconds=10] */
import { startTarget } from '../lib/child.js';
import { saturate, smokeCheck } from '../lib/load.js';

const name = process.argv[2] ?? 'evaluate';
const seconds = Number(process.argv[3] ?? 10);
const t = await startTarget(name);
try {
  await smokeCheck(t);
  const idle = async (label: string) => {
    const a = await t.cpu();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const b = await t.cpu();
    const busy = (b.userMicros + b.systemMicros - a.userMicros - a.systemMicros) / (b.wallMicros - a.wallMicros);
    console.log(`  ${name} ${label}: ${(busy * 100).toFixed(2)}% of a core while idle`);
  };
  await idle('after start');
  await saturate(t, { durationSec: 3, warmupSec: 0 });
  await idle('after 3 s of load');
} finally {
  await t.stop();
}
