/** Median of a non-empty list (mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  if (!values.length) throw new Error('median of nothing');
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The q-th percentile (0..100) of values already sorted ascending, nearest-rank method. */
export function percentileSorted(sorted: ArrayLike<number>, q: number): number {
  if (!sorted.length) return NaN;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((q / 100) * sorted.length)));
  return sorted[rank - 1]!;
}

export const round = (v: number, digits = 2) => Math.round(v * 10 ** digits) / 10 ** digits;
