/**
 * Market figures travel as decimal strings. Providers send them as JSON strings (GeckoTerminal,
 * DexScreener's priceUsd) or as JSON numbers (DexScreener's liquidity, volume, fdv, ...); both
 * are turned into one canonical decimal text here, by string manipulation only. Nothing here
 * does float arithmetic on a value: a JSON number is taken at its shortest round-trip text
 * (what the provider's serializer wrote), and sums and comparisons are done on scaled bigints.
 */

const PLAIN = /^(-?)([0-9]+)(?:\.([0-9]+))?$/;
const EXPONENT = /^(-?)([0-9]+)(?:\.([0-9]+))?[eE]([+-]?[0-9]{1,3})$/;

/** "007.50" → "7.5", "-0.0" → "0", "1.5e-7" → "0.00000015"; null when the text is not a decimal. */
export function normalizeDecimal(text: string): string | null {
  let sign: string;
  let digits: string;
  let point: number; // digits before the decimal point
  const plain = PLAIN.exec(text);
  if (plain) {
    sign = plain[1]!;
    digits = plain[2]! + (plain[3] ?? '');
    point = plain[2]!.length;
  } else {
    const exp = EXPONENT.exec(text);
    if (!exp) return null;
    sign = exp[1]!;
    digits = exp[2]! + (exp[3] ?? '');
    point = exp[2]!.length + Number(exp[4]);
  }
  if (point <= 0) {
    digits = '0'.repeat(1 - point) + digits;
    point = 1;
  } else if (point > digits.length) {
    digits = digits + '0'.repeat(point - digits.length);
  }
  const int = digits.slice(0, point).replace(/^0+(?=[0-9])/, '');
  const frac = digits.slice(point).replace(/0+$/, '');
  const body = frac ? `${int}.${frac}` : int;
  return /^0(\.0*)?$/.test(body) ? '0' : sign + body;
}

/** The decimal text of a finite JSON number, exactly as its shortest round-trip representation reads. */
export function decimalFromNumber(n: number): string | null {
  if (!Number.isFinite(n)) return null;
  return normalizeDecimal(String(n));
}

interface Scaled {
  value: bigint;
  scale: number;
}

function scaled(decimal: string): Scaled {
  const m = PLAIN.exec(decimal);
  if (!m) throw new Error(`not a normalized decimal: ${decimal}`);
  const frac = m[3] ?? '';
  const value = BigInt(m[2]! + frac);
  return { value: m[1] ? -value : value, scale: frac.length };
}

function align(a: Scaled, b: Scaled): [bigint, bigint, number] {
  const scale = Math.max(a.scale, b.scale);
  return [a.value * 10n ** BigInt(scale - a.scale), b.value * 10n ** BigInt(scale - b.scale), scale];
}

function fromScaled(value: bigint, scale: number): string {
  const negative = value < 0n;
  const abs = (negative ? -value : value).toString().padStart(scale + 1, '0');
  const text = scale ? `${abs.slice(0, abs.length - scale)}.${abs.slice(abs.length - scale)}` : abs;
  return normalizeDecimal((negative ? '-' : '') + text)!;
}

/** Exact sum of normalized decimal strings. */
export function addDecimals(values: readonly string[]): string {
  let acc: Scaled = { value: 0n, scale: 0 };
  for (const v of values) {
    const [a, b, scale] = align(acc, scaled(v));
    acc = { value: a + b, scale };
  }
  return fromScaled(acc.value, acc.scale);
}

/** -1, 0 or 1, exactly. */
export function compareDecimals(a: string, b: string): -1 | 0 | 1 {
  const [x, y] = align(scaled(a), scaled(b));
  return x < y ? -1 : x > y ? 1 : 0;
}

export const isZeroDecimal = (d: string) => d === '0';
export const isNegativeDecimal = (d: string) => d.startsWith('-');
