/**
 * Compares two CPU profiles made by profile.ts in absolute time per request: every sample in the
 * measured window is charged to a category (its own function's module, or for natives the nearest
 * JavaScript caller's), scaled by the run's µs per request.
 *   npx tsx bench/experiments/profile-diff.ts <a.cpuprofile> <a µs/req> <b.cpuprofile> <b µs/req> [windowSec=8]
 */
import { readFileSync } from 'node:fs';

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: Node[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number }

function categories(file: string, windowSec: number): Map<string, number> {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const cat = (id: number): string => {
    const n = byId.get(id)!;
    const name = n.callFrame.functionName;
    if (name === '(idle)') return '(idle)';
    if (name === '(garbage collector)') return '(gc)';
    if (name === '(program)') return '(program)';
    let url = n.callFrame.url;
    // natives (writev, …) and anonymous frames belong to their nearest caller with a file
    let cur = id;
    const own = name && !url ? `native ${name} <- ` : '';
    while (!url && parent.has(cur)) {
      cur = parent.get(cur)!;
      url = byId.get(cur)!.callFrame.url;
    }
    url = url.replace(/^file:\/\/\/(work\/main|tmp\/paywarden-snap)\//, '');
    let mod: string;
    if (url.startsWith('node_modules/')) mod = url.split('/').slice(0, url.startsWith('node_modules/@') ? 3 : 2).join('/');
    else if (url.startsWith('src/')) mod = url;
    else if (url.startsWith('node:')) mod = url.split('/').slice(0, 3).join('/');
    else mod = url || '(unknown)';
    return own.startsWith('native writev') || own.startsWith('native writeBuffer') || own.startsWith('native writeUtf8String') ? 'native socket write' : own ? `native ${name}` + (mod.startsWith('node_modules') || mod.startsWith('src') ? ` (${mod})` : '') : mod;
  };
  // keep the samples of the last `windowSec` seconds before the last non-idle sample
  const times: number[] = [];
  let t = p.startTime;
  for (const d of p.timeDeltas) times.push((t += d));
  let end = times.length - 1;
  while (end > 0 && byId.get(p.samples[end]!)!.callFrame.functionName === '(idle)') end--;
  const from = times[end]! - windowSec * 1e6;
  const counts = new Map<string, number>();
  let total = 0;
  for (let i = 0; i <= end; i++) {
    if (times[i]! < from) continue;
    const c = cat(p.samples[i]!);
    if (c === '(idle)') continue;
    counts.set(c, (counts.get(c) ?? 0) + 1);
    total++;
  }
  for (const [k, v] of counts) counts.set(k, v / total);
  return counts;
}

const [fa, ua, fb, ub, w] = process.argv.slice(2);
if (!fa || !ua || !fb || !ub) throw new Error('usage: profile-diff.ts a.cpuprofile aUs b.cpuprofile bUs [windowSec]');
const windowSec = Number(w ?? 7);
const a = categories(fa, windowSec);
const b = categories(fb, windowSec);
const keys = new Set([...a.keys(), ...b.keys()]);
const rows = [...keys].map((k) => ({ k, a: (a.get(k) ?? 0) * Number(ua), b: (b.get(k) ?? 0) * Number(ub) }));
rows.sort((x, y) => Math.abs(y.a - y.b) - Math.abs(x.a - x.b));
console.log(`${'category'.padEnd(70)} ${'A µs'.padStart(7)} ${'B µs'.padStart(7)} ${'A-B'.padStart(7)}`);
for (const r of rows.slice(0, 45)) console.log(`${r.k.slice(0, 70).padEnd(70)} ${r.a.toFixed(2).padStart(7)} ${r.b.toFixed(2).padStart(7)} ${(r.a - r.b).toFixed(2).padStart(7)}`);
console.log(`${'total'.padEnd(70)} ${Number(ua).toFixed(2).padStart(7)} ${Number(ub).toFixed(2).padStart(7)} ${(Number(ua) - Number(ub)).toFixed(2).padStart(7)}`);
