// A stand-in for the two market-data providers on the internet, DexScreener and GeckoTerminal,
// serving their REAL paths and response shapes for the tokens it is told about, and able to fail,
// slow down or answer with the providers' known quirks. One Fastify server on 127.0.0.1:
//
//   {url}/dexscreener    → MARKET_DEXSCREENER_URL    (GET /tokens/v1/base/{addresses}, /token-pairs/v1/base/{address})
//   {url}/geckoterminal  → MARKET_GECKOTERMINAL_URL  (GET /api/v2/networks/base/tokens/{address}[/pools])
//
// An unknown token gets each provider's real "nothing here" answer: DexScreener `[]`,
// GeckoTerminal HTTP 404 `{"errors":[{"status":"404","title":"Not Found"}]}`.
import Fastify, { type FastifyReply } from 'fastify';
import { getAddress } from 'viem';

/** One trading pair of a stub token; the token is always its BASE token (unless the quoteTokenOnly fault is on). */
export interface MarketFixturePair {
  /** DEX id as the providers would name it, e.g. "uniswap" (DexScreener) or "uniswap-v2-base" (GeckoTerminal). */
  dex: string;
  pairAddress: string;
  quoteToken: { address: string; symbol: string };
  /** USD, decimal string. */
  liquidityUsd: string;
  /** ISO 8601. */
  createdAt: string;
}

/**
 * What the stub knows about a token. USD figures and the 24 h change are decimal strings
 * ("1.0002", "-3.5"); fdvUsd, marketCapUsd and priceChange24hPct may be null (not reported).
 * Keep liquidityUsd equal to the sum of the pairs' liquidityUsd: DexScreener only reports
 * per-pair liquidity (the service sums it), GeckoTerminal reports the token total. The first
 * pair carries the whole 24 h volume. A token with no pairs is answered like an unknown token.
 */
export interface MarketFixture {
  name: string;
  symbol: string;
  decimals: number;
  priceUsd: string;
  liquidityUsd: string;
  volume24hUsd: string;
  fdvUsd: string | null;
  marketCapUsd: string | null;
  priceChange24hPct: string | null;
  pairs: MarketFixturePair[];
}

/** Faults of one provider; several may be on at once. `setFaults({})` clears them all. */
export interface ProviderFaults {
  /** Answer every request with this HTTP status (true: 500) and a small error body. */
  fail?: boolean | number;
  /** Wait this long before answering (exceed MARKET_TIMEOUT_MS to cause timeouts). */
  slowMs?: number;
  /** HTTP 200 with an empty list (DexScreener `[]`; GeckoTerminal pools `{"data": []}`) even for known tokens. */
  empty?: boolean;
  /** HTTP 200 with `pairs: null` (DexScreener's legacy `{schemaVersion, pairs: null}`; GeckoTerminal pools `{"data": null}`). */
  pairsNull?: boolean;
  /**
   * Wrong JSON types: DexScreener sends its numbers (liquidity, volume, fdv, marketCap, price
   * change) as strings and its priceUsd string as a number; GeckoTerminal, whose figures are
   * strings, sends them as numbers (the same quirk the other way round).
   */
  numbersAsStrings?: boolean;
  /** Every pair lists the token as its QUOTE token (base and quote swapped); prices belong to the other token. */
  quoteTokenOnly?: boolean;
  /** Required fields missing: DexScreener pairs without priceUsd, GeckoTerminal token without price_usd. */
  missingFields?: boolean;
  /** HTTP 200 with a body that is not JSON (an HTML error page from a CDN). */
  invalidJson?: boolean;
}

export interface MarketFaults {
  dexscreener?: ProviderFaults;
  geckoterminal?: ProviderFaults;
}

export interface StartMarketStubOptions {
  /** Default 0: a free port. */
  port?: number;
  tokens?: Record<string, MarketFixture>;
  faults?: MarketFaults;
}

export interface MarketStub {
  /** http://127.0.0.1:port */
  url: string;
  /** `${url}/dexscreener`: set as MARKET_DEXSCREENER_URL. */
  dexscreenerUrl: string;
  /** `${url}/geckoterminal`: set as MARKET_GECKOTERMINAL_URL. */
  geckoterminalUrl: string;
  /** Registers (or replaces) a token; `null` forgets it. Any address case. */
  setToken(address: string, fixture: MarketFixture | null): void;
  /** Replaces every fault. */
  setFaults(faults: MarketFaults): void;
  /** Requests answered per provider since start (or the last resetCounts). */
  counts(): { dexscreener: number; geckoterminal: number };
  resetCounts(): void;
  stop(): Promise<void>;
}

type Provider = keyof MarketFaults;
type Json = Record<string, unknown>;

const NOT_FOUND = { errors: [{ status: '404', title: 'Not Found' }] };
const lower = (a: string) => a.toLowerCase();
const checksum = (a: string) => getAddress(lower(a));

/** A JSON number with the decimal's value, as DexScreener's serializer writes its floats. */
const n = (d: string | null) => (d === null ? undefined : Number(d));

/** DexScreener pairs of token `address`; `asQuoteOf` set: only as listed under that (quote) token, where the faults do not apply. */
function dexPairs(address: string, t: MarketFixture, faults: ProviderFaults, asQuoteOf?: string): Json[] {
  // Pairs listed under their quote token belong to another token: never swap them.
  const f = asQuoteOf ? { ...faults, quoteTokenOnly: false } : faults;
  return t.pairs.map((p, i) => {
    const token = { address: checksum(address), name: t.name, symbol: t.symbol };
    const quote = { address: checksum(p.quoteToken.address), name: p.quoteToken.symbol, symbol: p.quoteToken.symbol };
    const volume = i === 0 ? t.volume24hUsd : '0';
    const num = (d: string | null) => (f.numbersAsStrings ? (d ?? undefined) : n(d));
    const pair: Json = {
      chainId: 'base',
      dexId: p.dex,
      url: `https://dexscreener.com/base/${lower(p.pairAddress)}`,
      pairAddress: checksum(p.pairAddress),
      baseToken: f.quoteTokenOnly ? quote : token,
      quoteToken: f.quoteTokenOnly ? token : quote,
      priceNative: t.priceUsd,
      priceUsd: f.numbersAsStrings ? Number(t.priceUsd) : t.priceUsd,
      txns: { m5: { buys: 0, sells: 0 }, h1: { buys: 0, sells: 0 }, h6: { buys: 0, sells: 0 }, h24: { buys: 12, sells: 9 } },
      volume: { h24: num(volume), h6: num('0'), h1: num('0'), m5: num('0') },
      priceChange: t.priceChange24hPct === null ? {} : { h1: num('0'), h6: num('0'), h24: num(t.priceChange24hPct) },
      liquidity: { usd: num(p.liquidityUsd), base: 0, quote: 0 },
      fdv: num(t.fdvUsd),
      marketCap: num(t.marketCapUsd),
      pairCreatedAt: Date.parse(p.createdAt),
    };
    if (f.missingFields) delete pair.priceUsd;
    return pair;
  });
}

function geckoToken(address: string, t: MarketFixture, f: ProviderFaults): Json {
  const fig = (d: string | null) => (f.numbersAsStrings && d !== null ? Number(d) : d);
  const attributes: Json = {
    address: lower(address),
    name: t.name,
    symbol: t.symbol,
    decimals: t.decimals,
    image_url: 'missing.png',
    coingecko_coin_id: null,
    price_usd: fig(t.priceUsd),
    fdv_usd: fig(t.fdvUsd),
    total_reserve_in_usd: fig(t.liquidityUsd),
    volume_usd: { h24: fig(t.volume24hUsd) },
    market_cap_usd: fig(t.marketCapUsd),
  };
  if (f.missingFields) delete attributes.price_usd;
  return {
    data: {
      id: `base_${lower(address)}`,
      type: 'token',
      attributes,
      relationships: { top_pools: { data: t.pairs.slice(0, 3).map((p) => ({ id: `base_${lower(p.pairAddress)}`, type: 'pool' })) } },
    },
  };
}

/** GeckoTerminal pools of token `address` (its base side), adding what `include` asks for to `included`. */
function geckoPools(address: string, t: MarketFixture, f: ProviderFaults, include: Set<string>, included: Map<string, Json>): Json[] {
  const fig = (d: string | null) => (f.numbersAsStrings && d !== null ? Number(d) : d);
  const tokenRef = { id: `base_${lower(address)}`, type: 'token' };
  return t.pairs.map((p, i) => {
    const quoteRef = { id: `base_${lower(p.quoteToken.address)}`, type: 'token' };
    const volume = i === 0 ? t.volume24hUsd : '0';
    if (include.has('base_token')) included.set(tokenRef.id, { ...tokenRef, attributes: { address: lower(address), name: t.name, symbol: t.symbol, image_url: 'missing.png', coingecko_coin_id: null } });
    if (include.has('quote_token')) included.set(quoteRef.id, { ...quoteRef, attributes: { address: lower(p.quoteToken.address), name: p.quoteToken.symbol, symbol: p.quoteToken.symbol, image_url: 'missing.png', coingecko_coin_id: null } });
    if (include.has('dex')) included.set(p.dex, { id: p.dex, type: 'dex', attributes: { name: p.dex } });
    return {
      id: `base_${lower(p.pairAddress)}`,
      type: 'pool',
      attributes: {
        base_token_price_usd: fig(t.priceUsd),
        quote_token_price_usd: fig('1'),
        address: lower(p.pairAddress),
        name: `${t.symbol} / ${p.quoteToken.symbol}`,
        pool_created_at: new Date(p.createdAt).toISOString().replace('.000Z', 'Z'),
        fdv_usd: fig(t.fdvUsd),
        market_cap_usd: fig(t.marketCapUsd),
        price_change_percentage: { m5: fig('0'), h1: fig('0'), h6: fig('0'), h24: fig(t.priceChange24hPct) },
        transactions: { h24: { buys: 12, sells: 9, buyers: 7, sellers: 5 } },
        volume_usd: { m5: fig('0'), h1: fig('0'), h6: fig('0'), h24: fig(volume) },
        reserve_in_usd: fig(p.liquidityUsd),
      },
      relationships: {
        base_token: { data: f.quoteTokenOnly ? quoteRef : tokenRef },
        quote_token: { data: f.quoteTokenOnly ? tokenRef : quoteRef },
        dex: { data: { id: p.dex, type: 'dex' } },
      },
    };
  });
}

export async function startMarketStub(opts: StartMarketStubOptions = {}): Promise<MarketStub> {
  const tokens = new Map<string, MarketFixture>();
  for (const [a, t] of Object.entries(opts.tokens ?? {})) tokens.set(lower(a), t);
  let faults: MarketFaults = opts.faults ?? {};
  const counts = { dexscreener: 0, geckoterminal: 0 };
  const known = (a: string) => {
    const t = tokens.get(lower(a));
    return t && t.pairs.length ? t : undefined;
  };
  /**
   * Other tokens with a pair quoted in `a`, each narrowed to those pairs. Like the real APIs, a
   * token's pair list also holds the pairs where it is the QUOTE token (X/USDC under USDC).
   */
  const quotedIn = (a: string): Array<[string, MarketFixture]> =>
    [...tokens.entries()]
      .filter(([other]) => other !== lower(a))
      .map(([other, t]): [string, MarketFixture] => [other, { ...t, pairs: t.pairs.filter((p) => lower(p.quoteToken.address) === lower(a)) }])
      .filter(([, t]) => t.pairs.length > 0);

  const app = Fastify({ logger: false });

  /** Counts, delays and fails; returns the faults when the handler should go on, null when answered. */
  async function gate(provider: Provider, reply: FastifyReply): Promise<ProviderFaults | null> {
    counts[provider]++;
    const f = faults[provider] ?? {};
    if (f.slowMs) await new Promise((r) => setTimeout(r, f.slowMs));
    if (f.fail) {
      const status = f.fail === true ? 500 : f.fail;
      await reply.status(status).send(provider === 'dexscreener' ? { error: 'Internal Server Error' } : { errors: [{ status: String(status), title: 'Internal Server Error' }] });
      return null;
    }
    if (f.invalidJson) {
      await reply.status(200).type('text/html').send('<html><body>502 Bad Gateway</body></html>');
      return null;
    }
    return f;
  }

  const dexList = async (provider: Provider, reply: FastifyReply, chainId: string, addresses: string[]) => {
    const f = await gate(provider, reply);
    if (!f) return reply;
    if (f.pairsNull) return reply.send({ schemaVersion: '1.0.0', pairs: null });
    if (f.empty || chainId !== 'base') return reply.send([]);
    return reply.send(addresses.flatMap((a) => {
      const t = known(a);
      return [...(t ? dexPairs(a, t, f) : []), ...quotedIn(a).flatMap(([other, o]) => dexPairs(other, o, f, a))];
    }));
  };

  app.get<{ Params: { chainId: string; addresses: string } }>('/dexscreener/tokens/v1/:chainId/:addresses', (req, reply) =>
    dexList('dexscreener', reply, req.params.chainId, req.params.addresses.split(',').slice(0, 30)),
  );
  app.get<{ Params: { chainId: string; address: string } }>('/dexscreener/token-pairs/v1/:chainId/:address', (req, reply) =>
    dexList('dexscreener', reply, req.params.chainId, [req.params.address]),
  );

  app.get<{ Params: { network: string; address: string } }>('/geckoterminal/api/v2/networks/:network/tokens/:address', async (req, reply) => {
    const f = await gate('geckoterminal', reply);
    if (!f) return reply;
    const t = req.params.network === 'base' ? known(req.params.address) : undefined;
    if (!t) return reply.status(404).send(NOT_FOUND);
    return reply.send(geckoToken(req.params.address, t, f));
  });
  app.get<{ Params: { network: string; address: string }; Querystring: { include?: string } }>(
    '/geckoterminal/api/v2/networks/:network/tokens/:address/pools',
    async (req, reply) => {
      const f = await gate('geckoterminal', reply);
      if (!f) return reply;
      const t = req.params.network === 'base' ? known(req.params.address) : undefined;
      if (!t) return reply.status(404).send(NOT_FOUND);
      if (f.pairsNull) return reply.send({ data: null });
      if (f.empty) return reply.send({ data: [] });
      const include = new Set((req.query.include ?? '').split(',').map((s) => s.trim()).filter(Boolean));
      const included = new Map<string, Json>();
      const data = [
        ...geckoPools(req.params.address, t, f, include, included),
        ...quotedIn(req.params.address).flatMap(([other, o]) => geckoPools(other, o, { ...f, quoteTokenOnly: false }, include, included)),
      ];
      return reply.send(include.size ? { data, included: [...included.values()] } : { data });
    },
  );

  const address = await app.listen({ host: '127.0.0.1', port: opts.port ?? 0 });
  const url = address.replace('localhost', '127.0.0.1');
  let stopping: Promise<void> | undefined;
  return {
    url,
    dexscreenerUrl: `${url}/dexscreener`,
    geckoterminalUrl: `${url}/geckoterminal`,
    setToken(a, fixture) {
      if (fixture === null) tokens.delete(lower(a));
      else tokens.set(lower(a), fixture);
    },
    setFaults(next) {
      faults = next;
    },
    counts: () => ({ ...counts }),
    resetCounts() {
      counts.dexscreener = 0;
      counts.geckoterminal = 0;
    },
    stop: () => (stopping ??= app.close().then(() => undefined)),
  };
}
