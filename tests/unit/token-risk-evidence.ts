import type { Address } from 'viem';
import type { PrivilegedSelector, TokenRiskEvidence } from '../../src/features/token-risk/evidence.js';
import { PRIVILEGED_SELECTORS } from '../../src/features/token-risk/bytecode.js';

/** Evidence builders for the scoring tests: a clean, fully checked token, and tweaks of it. */

export const TOKEN: Address = '0x1111111111111111111111111111111111111111';
export const OWNER: Address = '0x2222222222222222222222222222222222222222';
export const IMPL: Address = '0x3333333333333333333333333333333333333333';
export const ADMIN: Address = '0x4444444444444444444444444444444444444444';
export const PAIR: Address = '0x5555555555555555555555555555555555555555';
export const WETH: Address = '0x4200000000000000000000000000000000000006';
export const DEAD: Address = '0x000000000000000000000000000000000000dEaD';
export const ZERO: Address = '0x0000000000000000000000000000000000000000';

const E18 = 10n ** 18n;

/** A plain token with a renounced owner, a WETH pool and tax-free trades; liquidity not configured. */
export function cleanEvidence(): TokenRiskEvidence {
  return {
    address: TOKEN,
    blockNumber: 100n,
    contract: { kind: 'contract', codeSize: 2000, cloneOf: null, delegate: null, totalSupply: 1_000_000n * E18, decimals: 18, name: 'Clean', symbol: 'CLN', paused: null },
    upgradeability: {
      eip1967: { implementation: null, admin: null, beacon: null },
      beaconImplementation: null,
      zeppelinos: { implementation: null, admin: null },
      unknownDelegation: false,
      logic: { address: TOKEN, source: 'token', codeSize: 2000 },
      upgradeSelectors: [],
    },
    ownership: { owner: ZERO, ownerFunction: 'owner()', malformed: false, ownerIsContract: null, accessControl: { present: false, enumerable: false, adminCount: null, admins: [] } },
    privileges: { scanned: true, selectors: [] },
    simulation: {
      status: 'simulated',
      pool: { dex: 'uniswap-v2', pair: PAIR, quote: { address: WETH, symbol: 'WETH', decimals: 18 }, reserveToken: 500_000n * E18, reserveQuote: 10n * E18 },
      buyer: '0x6666666666666666666666666666666666666666',
      recipient: '0x7777777777777777777777777777777777777777',
      buy: { step: { status: 'ok' }, amountIn: E18 / 20n, expectedOut: 2480n * E18, received: 2480n * E18 },
      transfer: { step: { status: 'ok' }, amount: 248n * E18, received: 248n * E18 },
      sell: { step: { status: 'ok' }, amountIn: 1240n * E18, expectedOut: E18 / 40n, received: E18 / 40n },
    },
    liquidity: { status: 'not_configured' },
    holders: { totalSupply: 1_000_000n * E18, owner: null, pool: 500_000n * E18, burned: 0n },
  };
}

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

function merge<T>(base: T, patch: DeepPartial<T>): T {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch) || typeof base !== 'object' || base === null) return patch as T;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(patch)) {
    const b = (base as Record<string, unknown>)[k];
    out[k] = v !== null && typeof v === 'object' && !Array.isArray(v) && typeof v !== 'bigint' && b !== null && typeof b === 'object' && !('status' in (v as object) && (v as { status: unknown }).status !== (b as { status?: unknown }).status) ? merge(b, v as never) : v;
  }
  return out as T;
}

/** The clean evidence with a deep patch applied (objects merge; arrays and variants replace). */
export const evidenceWith = (patch: DeepPartial<TokenRiskEvidence>): TokenRiskEvidence => merge(cleanEvidence(), patch);

export const selectorsOf = (...kinds: PrivilegedSelector['kind'][]): PrivilegedSelector[] =>
  kinds.map((k) => PRIVILEGED_SELECTORS.find((s) => s.kind === k)!);

/** A simulated sell/buy that received `pct`% less than the fair amount. */
export const taxed = (expected: bigint, pct: number) => expected - (expected * BigInt(Math.round(pct * 100))) / 10_000n;

export const liveOwner = { owner: OWNER, ownerFunction: 'owner()' as const, ownerIsContract: false };
