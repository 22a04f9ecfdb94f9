/**
 * Decoded ABI values as JSON: bigints become decimal strings (JSON has no integers that
 * large, and reports are stored and signed as JSON), tuples and arrays are walked.
 */
export function plain(value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (Array.isArray(value)) return value.map(plain);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = plain(v);
    return out;
  }
  return value;
}
