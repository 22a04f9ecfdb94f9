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
