/** Prints the machine's busy cores every second: npx tsx bench/experiments/load-watch.ts [seconds=60] */
import { busyCores } from '../lib/machine.js';

const n = Number(process.argv[2] ?? 60);
for (let i = 0; i < n; i++) console.log(`${new Date().toISOString().slice(11, 19)} ${(await busyCores(1000))?.toFixed(2)}`);
