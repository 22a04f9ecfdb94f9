import { Type } from 'typebox';
import { getAddress } from 'viem';
import { getJson, type HttpPolicy, type JsonAnswer } from './http.js';
import { DECIMAL_TEXT, byLiquidityDesc, evmAddress, isoFromText, pctOrNull, shapeCheck, topPairs, usd, usdOrNull } from './normalize.js';
import { tokenText } from '../token-metadata.js';
import { ProviderError, type MarketPair, type MarketProvider, type ProviderOutcome } from './types.js';

/**
 * GeckoTerminal public API v2 (JSON:API), network `base`:
 *   GET {base}/api/v2/networks/base/tokens/{address}
 *     → { data: { id: "base_0x…", type: "token", attributes: { address, name, symbol, decimals,
 *         price_usd, fdv_usd, market_cap_usd, total_reserve_in_usd, volume_usd{h24} } } }
 *       figures are JSON STRINGS (or null); an unindexed token is HTTP 404 { errors: [...] }.
 *   GET {base}/api/v2/networks/base/tokens/{address}/pools?include=base_token,quote_token,dex
 *     → { data: [ { id, type: "pool", attributes: { address, reserve_in_usd, pool_created_at,
 *         price_change_percentage{h24}, ... }, relationships: { base_token, quote_token, dex } } ],
 *         included: [ tokens and dexes ] }
 * The two requests go out in parallel.
 */

const NAME = 'geckoterminal' as const;
const Decimal = Type.String({ pattern: DECIMAL_TEXT });
const NullableDecimal = Type.Union([Decimal, Type.Null()]);
const Ref = Type.Object({ data: Type.Object({ id: Type.String() }) });

const TokenDoc = Type.Object({
  data: Type.Object({
    type: Type.Literal('token'),
    attributes: Type.Object({
      address: Type.String(),
      name: Type.String(),
      symbol: Type.String(),
      decimals: Type.Integer({ minimum: 0, maximum: 255 }),
      price_usd: Decimal,
      fdv_usd: Type.Optional(NullableDecimal),
      market_cap_usd: Type.Optional(NullableDecimal),
      total_reserve_in_usd: Type.Optional(NullableDecimal),
      volume_usd: Type.Object({ h24: NullableDecimal }),
    }),
  }),
});
interface TokenDoc {
  data: {
    attributes: {
      address: string;
      name: string;
      symbol: string;
      decimals: number;
      price_usd: string;
      fdv_usd?: string | null;
      market_cap_usd?: string | null;
      total_reserve_in_usd?: string | null;
      volume_usd: { h24: string | null };
    };
  };
}

const Pool = Type.Object({
  type: Type.Literal('pool'),
  attributes: Type.Object({
    address: Type.String(),
    reserve_in_usd: Type.Optional(NullableDecimal),
    pool_created_at: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    price_change_percentage: Type.Optional(Type.Object({ h24: Type.Optional(NullableDecimal) })),
  }),
  relationships: Type.Object({ base_token: Ref, quote_token: Ref, dex: Ref }),
});
interface Pool {
  attributes: { address: string; reserve_in_usd?: string | null; pool_created_at?: string | null; price_change_percentage?: { h24?: string | null } };
  relationships: { base_token: { data: { id: string } }; quote_token: { data: { id: string } }; dex: { data: { id: string } } };
}
const PoolsDoc = Type.Object({
  data: Type.Array(Type.Unknown()),
  included: Type.Optional(Type.Array(Type.Object({ id: Type.String(), type: Type.String(), attributes: Type.Record(Type.String(), Type.Unknown()) }))),
});
interface PoolsDoc {
  data: unknown[];
  included?: Array<{ id: string; type: string; attributes: Record<string, unknown> }>;
}

const checkToken = shapeCheck<TokenDoc>(NAME, 'token', TokenDoc);
const checkPool = shapeCheck<Pool>(NAME, 'pool', Pool);
const checkPools = shapeCheck<PoolsDoc>(NAME, 'pools', PoolsDoc);

/** GeckoTerminal's own 404 body; a 404 from anything else (a wrong base URL, a proxy) proves nothing. */
function isGeckoNotFound(answer: JsonAnswer): boolean {
  const errors = (answer.body as { errors?: unknown } | null)?.errors;
  return answer.status === 404 && Array.isArray(errors) && errors.some((e) => String((e as { status?: unknown })?.status) === '404');
}

export class GeckoTerminalProvider implements MarketProvider {
  readonly name = NAME;
  private readonly baseUrl: string;

  constructor(baseUrl: string, private readonly policy: HttpPolicy, private readonly now: () => Date) {
    this.baseUrl = `${baseUrl.replace(/\/+$/, '')}/api/v2/networks/base/tokens`;
  }

  async lookup(address: string): Promise<ProviderOutcome> {
    const accept = (s: number) => s === 200 || s === 404;
    const [tokenRes, poolsRes] = await Promise.allSettled([
      getJson(NAME, `${this.baseUrl}/${address}`, this.policy, accept),
      getJson(NAME, `${this.baseUrl}/${address}/pools?include=base_token,quote_token,dex`, this.policy, accept),
    ]);
    if (tokenRes.status === 'rejected') throw tokenRes.reason;
    if (tokenRes.value.status === 404) {
      if (!isGeckoNotFound(tokenRes.value)) throw new ProviderError(NAME, 'http_status', 'HTTP 404 without GeckoTerminal\'s error body');
      // Unknown token: the pools request must agree (its own 404, or no pools); if it failed or
      // lists pools, the answer is not a clean "none".
      if (poolsRes.status === 'rejected') throw poolsRes.reason;
      const pools = poolsRes.value;
      const noPools = isGeckoNotFound(pools) || (pools.status === 200 && Array.isArray((pools.body as { data?: unknown } | null)?.data) && (pools.body as { data: unknown[] }).data.length === 0);
      if (!noPools) throw new ProviderError(NAME, 'shape', 'token unknown but its pools answered otherwise');
      return { kind: 'none' };
    }
    if (poolsRes.status === 'rejected') throw poolsRes.reason;
    if (poolsRes.value.status !== 200) throw new ProviderError(NAME, 'http_status', `token known but pools answered HTTP ${poolsRes.value.status}`);

    const token = checkToken(tokenRes.value.body).data.attributes;
    if (token.address.toLowerCase() !== address) throw new ProviderError(NAME, 'token_mismatch', 'answered for another token');

    const body = poolsRes.value.body as { data?: unknown } | null;
    if (body && typeof body === 'object' && body.data === null) throw new ProviderError(NAME, 'pairs_null', 'pools data is null');
    const doc = checkPools(body);
    if (doc.data.length === 0) throw new ProviderError(NAME, 'empty_list', 'the token has a price but its pool list is empty');
    const included = new Map((doc.included ?? []).map((r) => [r.id, r]));
    const tokenId = `base_${address}`;
    const pools = doc.data.map((raw) => checkPool(raw)).filter((p) => p.relationships.base_token.data.id.toLowerCase() === tokenId);
    if (pools.length === 0) throw new ProviderError(NAME, 'quote_token_only', 'the token appears only as the quote token of its pools');

    const pairs = byLiquidityDesc(
      pools.map((p, i) => {
        const at = `pools[${i}]`;
        const quoteId = p.relationships.quote_token.data.id;
        const quote = included.get(quoteId)?.attributes;
        if (!quote || typeof quote.address !== 'string' || typeof quote.symbol !== 'string') {
          throw new ProviderError(NAME, 'shape', `${at}: quote token ${quoteId} missing from included`);
        }
        return {
          pair: {
            dex: tokenText(p.relationships.dex.data.id),
            pairAddress: evmAddress(NAME, p.attributes.address, `${at}.address`),
            quoteToken: { address: evmAddress(NAME, quote.address, `${at}.quote.address`), symbol: tokenText(quote.symbol) },
            liquidityUsd: usdOrNull(NAME, p.attributes.reserve_in_usd, `${at}.reserve_in_usd`),
            createdAt: isoFromText(NAME, p.attributes.pool_created_at, `${at}.pool_created_at`),
          } satisfies MarketPair,
          liquidityUsd: usdOrNull(NAME, p.attributes.reserve_in_usd, `${at}.reserve_in_usd`),
          change: pctOrNull(NAME, p.attributes.price_change_percentage?.h24, `${at}.price_change_percentage.h24`),
        };
      }),
    );

    return {
      kind: 'market',
      snapshot: {
        provider: NAME,
        token: { address: getAddress(address), name: token.name, symbol: token.symbol, decimals: token.decimals },
        priceUsd: usd(NAME, token.price_usd, 'price_usd'),
        liquidityUsd: usdOrNull(NAME, token.total_reserve_in_usd, 'total_reserve_in_usd'),
        volume24hUsd: usdOrNull(NAME, token.volume_usd.h24, 'volume_usd.h24'),
        fdvUsd: usdOrNull(NAME, token.fdv_usd, 'fdv_usd'),
        marketCapUsd: usdOrNull(NAME, token.market_cap_usd, 'market_cap_usd'),
        priceChange24hPct: pairs[0]!.change,
        pairs: topPairs(pairs.map((p) => p.pair)),
        fetchedAt: this.now(),
      },
    };
  }
}
