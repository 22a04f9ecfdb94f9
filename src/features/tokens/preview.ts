import { Type, type Static, type TSchema } from 'typebox';
import { NETWORK, PAID_REPORTS } from '../../platform/prices.js';
import { PROVIDER_NAMES } from '../../platform/market/types.js';
import { Address, DateTime, StringEnum } from '../../platform/schemas.js';
import {
  FRESH_SECONDS,
  STALE_IDENTITY_SECONDS,
  STALE_MARKET_SECONDS,
  type MarketView,
} from './market-view.js';

/** The free token preview: identity, market, freshness, and what the paid report would add. No verdict. */

/**
 * `T | null` as a JSON-schema type array (`"type": ["string", "null"]`, valid OpenAPI 3.1)
 * rather than anyOf: the response serializer then picks the branch with a typeof check instead
 * of running a validator per field, which halves the preview's serialization time.
 */
function nullable<T extends TSchema>(schema: T, options: Record<string, unknown> = {}) {
  const json = JSON.parse(JSON.stringify(schema)) as { type: string } & Record<string, unknown>;
  return Type.Unsafe<Static<T> | null>({ ...json, ...options, type: [json.type, 'null'] });
}

const Usd = (description: string) =>
  nullable(Type.String({ pattern: '^[0-9]+(\\.[0-9]+)?$' }), {
    description: `${description}: USD as a decimal string (exact, never a float), or null when unknown or withheld`,
  });

export const MarketPairSchema = Type.Object({
  dex: Type.String({ description: "The DEX, as the provider names it (e.g. DexScreener's dexId)" }),
  pairAddress: Address('Pair (pool) contract'),
  quoteToken: Type.Object({ address: Address('Quote token'), symbol: Type.String() }),
  liquidityUsd: Usd('Liquidity of this pair'),
  createdAt: nullable(DateTime(), { description: 'When the pair was created, if the provider knows' }),
});

export const TokenIdentitySchema = Type.Object({
  address: Address('The token, EIP-55 checksummed'),
  name: nullable(Type.String()),
  symbol: nullable(Type.String()),
  decimals: nullable(Type.Integer({ minimum: 0, maximum: 255 }), {
    description: 'From the provider, else read on Base (ERC-20 decimals()); null when neither could tell',
  }),
});

export const SourceSchema = Type.Object(
  {
    provider: StringEnum(PROVIDER_NAMES, { description: 'Market-data provider of the answer shown (DexScreener first, GeckoTerminal on failover)' }),
    fetchedAt: DateTime('When that provider answered'),
    ageSeconds: Type.Integer({ minimum: 0 }),
    stale: Type.Boolean({ description: `true: every provider is failing and this is the last good answer (metrics served for at most ${STALE_MARKET_SECONDS} s after fetchedAt)` }),
    limited: Type.Boolean({ description: `true: the last good answer is older than ${STALE_MARKET_SECONDS} s, so market metrics are withheld (null); identity is served for up to ${STALE_IDENTITY_SECONDS} s` }),
  },
  { description: `Freshness. Provider answers are reused for up to ${FRESH_SECONDS} s (stale false).` },
);

/** Where the market data of a view came from and how fresh it is (the `source` of preview and coverage). */
export function sourceOf(view: MarketView): Static<typeof SourceSchema> {
  return { provider: view.provider, fetchedAt: view.fetchedAt.toISOString(), ageSeconds: view.ageSeconds, stale: view.stale, limited: view.limited };
}

const PAID_ADDS = [
  { category: 'ownership', description: 'owner() / getOwner(), whether ownership is renounced, AccessControl admin roles' },
  { category: 'privilegedFunctions', description: 'Mint, pause, blacklist, fee and limit setters, trading gates and upgrade functions found in the (implementation) bytecode' },
  { category: 'upgradeability', description: 'EIP-1967 / ZeppelinOS proxy slots (implementation and admin), EIP-1167 clones, EIP-7702 delegation' },
  { category: 'transferSimulation', description: 'Simulated buy, sell and plain transfer: honeypot detection (sells that revert or return almost nothing) and measured buy, sell and transfer taxes' },
  { category: 'holderConcentration', description: 'How much of the supply sits with the trading pairs, the owner and burn addresses' },
] as const;

export const PaidReportAddsSchema = Type.Object(
  {
    report: Type.Literal(PAID_REPORTS.tokenRisk.path),
    method: Type.Literal('POST'),
    price: Type.Literal(PAID_REPORTS.tokenRisk.price, { description: 'USDC per delivered report' }),
    asset: Type.Literal('USDC'),
    network: Type.Literal(NETWORK),
    chargedEvenWhenIncomplete: Type.Literal(true),
    invoked: Type.Literal(false),
    charged: Type.Literal(false),
    adds: Type.Array(Type.Object({ category: Type.String(), description: Type.String() })),
    note: Type.String(),
  },
  { description: 'What the paid token-risk report adds to this preview; nothing was invoked or charged' },
);

export const PreviewResponse = Type.Object(
  {
    token: TokenIdentitySchema,
    market: Type.Object({
      priceUsd: Usd('Price of one token'),
      liquidityUsd: Usd('Liquidity of the pairs where the token is the base token'),
      volume24hUsd: Usd('Trading volume over 24 hours'),
      fdvUsd: Usd('Fully diluted valuation'),
      marketCapUsd: Usd('Market capitalization'),
      priceChange24hPct: nullable(Type.String({ pattern: '^-?[0-9]+(\\.[0-9]+)?$' }), { description: 'Price change over 24 hours, percent, as a decimal string' }),
      pairs: nullable(Type.Array(MarketPairSchema, { maxItems: 5 }), { description: 'Main trading pairs, most liquid first (at most 5); null when withheld' }),
    }),
    source: SourceSchema,
    paidReportAdds: PaidReportAddsSchema,
  },
  { description: 'Token preview: market data only, no security verdict' },
);
export type PreviewResponse = Static<typeof PreviewResponse>;

export const PAID_REPORT_ADDS: PreviewResponse['paidReportAdds'] = {
  report: PAID_REPORTS.tokenRisk.path,
  method: 'POST',
  price: PAID_REPORTS.tokenRisk.price,
  asset: 'USDC',
  network: NETWORK,
  chargedEvenWhenIncomplete: true,
  invoked: false,
  charged: false,
  adds: PAID_ADDS.map((a) => ({ ...a })),
  note: 'This preview carries no security verdict. The paid report is computed from onchain evidence at request time, never from a stale fallback, and is charged per delivered report, INCOMPLETE included.',
};

export function previewBody(view: MarketView): PreviewResponse {
  const s = view.snapshot;
  return {
    token: view.token,
    market: {
      priceUsd: s?.priceUsd ?? null,
      liquidityUsd: s?.liquidityUsd ?? null,
      volume24hUsd: s?.volume24hUsd ?? null,
      fdvUsd: s?.fdvUsd ?? null,
      marketCapUsd: s?.marketCapUsd ?? null,
      priceChange24hPct: s?.priceChange24hPct ?? null,
      pairs: s ? s.pairs : null,
    },
    source: sourceOf(view),
    paidReportAdds: PAID_REPORT_ADDS,
  };
}
