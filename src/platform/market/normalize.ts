import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { getAddress } from 'viem';
import { compareDecimals, decimalFromNumber, isNegativeDecimal, normalizeDecimal } from './decimal.js';
import { MAX_PAIRS, ProviderError, type MarketPair, type ProviderName } from './types.js';

/**
 * Helpers both adapters use to turn a provider's JSON into a MarketSnapshot, strictly: a field of
 * the wrong JSON type (a number sent as a string or the reverse), a required field that is
 * missing, or a figure that is not a decimal is a ProviderError ("shape"), so that a drifted or
 * broken answer fails over to the next provider instead of being half-read.
 */

/** A compiled TypeBox check that throws a ProviderError naming the first offending path. */
export function shapeCheck<T>(provider: ProviderName, what: string, schema: TSchema): (value: unknown) => T {
  const compiled = Compile(schema);
  return (value) => {
    if (compiled.Check(value)) return value as T;
    const first = [...compiled.Errors(value)][0];
    throw new ProviderError(provider, 'shape', `${what}${first?.instancePath ?? ''}: ${first?.message ?? 'unexpected shape'}`);
  };
}

/** JSON-string decimal, as providers write prices ("0.0001685", sometimes "1.2e-9"). */
export const DECIMAL_TEXT = '^-?[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]{1,3})?$';

function decimal(provider: ProviderName, value: string | number, path: string, signed: boolean): string {
  const d = typeof value === 'number' ? decimalFromNumber(value) : normalizeDecimal(value);
  if (d === null) throw new ProviderError(provider, 'shape', `${path}: not a decimal`);
  if (!signed && isNegativeDecimal(d)) throw new ProviderError(provider, 'shape', `${path}: negative`);
  return d;
}

/** A non-negative USD figure (from a JSON string or number, whichever the field's documented type is). */
export const usd = (p: ProviderName, v: string | number, path: string) => decimal(p, v, path, false);
export const usdOrNull = (p: ProviderName, v: string | number | null | undefined, path: string) =>
  v === null || v === undefined ? null : decimal(p, v, path, false);
/** A signed percentage. */
export const pctOrNull = (p: ProviderName, v: string | number | null | undefined, path: string) =>
  v === null || v === undefined ? null : decimal(p, v, path, true);

/** EIP-55 form of a provider-reported EVM address; anything else is a shape failure. */
export function evmAddress(provider: ProviderName, value: string, path: string): string {
  if (!/^0x[0-9a-fA-F]{40}$/.test(value)) throw new ProviderError(provider, 'shape', `${path}: not an EVM address`);
  return getAddress(value.toLowerCase());
}

/** Most liquid first; unknown liquidity last; the provider's order among equals. */
export function byLiquidityDesc<T extends { liquidityUsd: string | null }>(items: readonly T[]): T[] {
  return items
    .map((item, i) => ({ item, i }))
    .sort((a, b) => {
      const x = a.item.liquidityUsd;
      const y = b.item.liquidityUsd;
      if (x === null || y === null) return x === y ? a.i - b.i : x === null ? 1 : -1;
      return compareDecimals(y, x) || a.i - b.i;
    })
    .map(({ item }) => item);
}

export const topPairs = (pairs: readonly MarketPair[]) => byLiquidityDesc(pairs).slice(0, MAX_PAIRS);

/** Milliseconds since the epoch (DexScreener pairCreatedAt) to ISO, or null when absent or absurd. */
export function isoFromMillis(ms: number | undefined): string | null {
  if (ms === undefined || !Number.isSafeInteger(ms) || ms <= 0) return null;
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

export function isoFromText(provider: ProviderName, text: string | null | undefined, path: string): string | null {
  if (text === null || text === undefined) return null;
  const d = new Date(text);
  if (Number.isNaN(d.getTime())) throw new ProviderError(provider, 'shape', `${path}: not a date`);
  return d.toISOString();
}
