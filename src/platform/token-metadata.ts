/**
 * What a token says about itself on chain, made safe to use: a hostile token answers whatever it
 * likes, and decoders do not always check (viem's uint8 decoder accepts any 256-bit word).
 */

/** ERC-20 decimals() is a uint8. */
export const MAX_TOKEN_DECIMALS = 255;

/**
 * decimals() when it is an integer in 0..255, else null (unknown: amounts are then shown in
 * base units). A larger value would make formatUnits build a string that long, or throw.
 */
export function tokenDecimals(value: unknown): number | null {
  if (typeof value === 'bigint') return value >= 0n && value <= BigInt(MAX_TOKEN_DECIMALS) ? Number(value) : null;
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= MAX_TOKEN_DECIMALS ? value : null;
}

/** Longest name or symbol shown, in characters (code points). */
export const MAX_TOKEN_TEXT = 200;

/**
 * Control characters (C0, DEL, C1), format characters (bidi overrides and isolates such as
 * U+202E, zero-width characters, the BOM) and lone surrogates: none belongs in a label, and each
 * helps a look-alike pass as the real token ("USDC\u202Egnp.exe" shows as "USDCexe.png").
 */
const UNSHOWABLE = /[\p{Cc}\p{Cf}\p{Cs}]/gu;

/** A token's name() or symbol() made safe to show: unshowable characters dropped, cut at `max` code points (never inside a surrogate pair). */
export function tokenText(value: string, max = MAX_TOKEN_TEXT): string {
  return Array.from(value.replace(UNSHOWABLE, '')).slice(0, max).join('');
}
