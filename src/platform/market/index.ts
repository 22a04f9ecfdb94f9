// Market-data providers (DexScreener, GeckoTerminal), their failover and the normalized snapshot.
export { addDecimals, compareDecimals, decimalFromNumber, normalizeDecimal } from './decimal.js';
export { DexScreenerProvider } from './dexscreener.js';
export { createMarketData, MarketData, MarketUnavailableError, type Attempt, type MarketDataOptions, type MarketLookup } from './failover.js';
export { GeckoTerminalProvider } from './geckoterminal.js';
export { getJson, type HttpPolicy } from './http.js';
export {
  MAX_PAIRS,
  PROVIDER_NAMES,
  ProviderError,
  type MarketPair,
  type MarketProvider,
  type MarketSnapshot,
  type ProviderFailureKind,
  type ProviderName,
  type ProviderOutcome,
  type TokenIdentity,
} from './types.js';
