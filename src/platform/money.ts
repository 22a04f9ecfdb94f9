/**
 * USDC amounts travel as decimal strings and live as integer micro-USDC (`bigint`, 6 decimals).
 * Parsing is strict: a sign, an exponent, white space, a seventh fractional digit or non-ASCII
 * digits are rejected, never rounded.
 */
export const USDC_DECIMALS = 6;
const SCALE = 10n ** BigInt(USDC_DECIMALS);

/**
 * Amounts have at most 12 integer digits (below one trillion USDC), so that any day's sum of
 * them stays far inside a signed 64-bit column on SQLite and PostgreSQL.
 */
export const MAX_MICRO_USDC = 10n ** 12n * SCALE - 1n;

/** JSON-schema pattern of an amount: 1 to 12 digits, optional fraction of 1 to 6 digits. */
export const AMOUNT_PATTERN = '^[0-9]{1,12}(\\.[0-9]{1,6})?$';
/** The evidence intent's stricter form: no leading zeros in the integer part. */
export const CANONICAL_AMOUNT_PATTERN = '^(0|[1-9][0-9]{0,11})(\\.[0-9]{1,6})?$';

const AMOUNT_RE = new RegExp(AMOUNT_PATTERN);

export function isAmount(s: unknown): s is string {
  return typeof s === 'string' && AMOUNT_RE.test(s);
}

/**
 * Parses a decimal USDC string into micro-USDC. Throws RangeError on anything but a plain amount
 * (exactly what AMOUNT_PATTERN accepts).
 *
 * One pass over the characters instead of the pattern plus split and two string-to-BigInt
 * conversions: every request of the free evaluation parses four amounts, and this is several
 * times cheaper. It stays exact: at most 12 integer digits (< 10^12) and 6 fractional digits
 * (< 10^6) are integers far below 2^53, so the Number arithmetic never rounds, and the scaling
 * to micro-USDC happens in bigint.
 */
export function parseUsdc(s: string): bigint {
  if (typeof s === 'string') {
    const n = s.length;
    let i = 0;
    let whole = 0;
    for (; i < n && i < 13; i++) {
      const d = s.charCodeAt(i) - 48;
      if (d < 0 || d > 9) break;
      whole = whole * 10 + d;
    }
    if (i >= 1 && i <= 12) {
      if (i === n) return BigInt(whole) * SCALE;
      if (s.charCodeAt(i) === 46 /* . */ && n - i - 1 >= 1 && n - i - 1 <= USDC_DECIMALS) {
        let frac = 0;
        let j = i + 1;
        for (; j < n; j++) {
          const d = s.charCodeAt(j) - 48;
          if (d < 0 || d > 9) break;
          frac = frac * 10 + d;
        }
        if (j === n) return BigInt(whole) * SCALE + BigInt(frac * 10 ** (USDC_DECIMALS - (n - i - 1)));
      }
    }
  }
  // JSON.stringify would itself throw (a TypeError) on a bigint; describe non-strings by type.
  throw new RangeError(`not a USDC amount: ${typeof s === 'string' ? JSON.stringify(s) : typeof s}`);
}

/** Formats micro-USDC as the canonical decimal string: no leading zeros, no trailing fractional zeros. */
export function formatUsdc(micro: bigint): string {
  if (micro < 0n) throw new RangeError('negative amount');
  const whole = micro / SCALE;
  const frac = (micro % SCALE).toString().padStart(USDC_DECIMALS, '0').replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : whole.toString();
}
