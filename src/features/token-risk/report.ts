import { getAddress, type Address } from 'viem';
import type { Static } from 'typebox';
import { upstream, type ChainClient } from '../../platform/chain.js';
import { NETWORK } from '../../platform/prices.js';
import type { TokenAddressRequest } from '../tokens/schemas.js';
import { percent, taxBps } from './categories.js';
import { collectEvidence, type CollectOptions } from './collect.js';
import type { SimStep, SimulationEvidence, TokenRiskEvidence } from './evidence.js';
import type { RpcMeter } from './rpc.js';
import { RULES_VERSION, scoreTokenRisk } from './score.js';
import type { TokenRiskReport } from './schemas.js';

export interface TokenRiskOptions extends CollectOptions {
  /** Receives the RPC cost of each report (requests and sequential rounds). */
  onMeter?: (meter: RpcMeter) => void;
  /** Receives the raw evidence (tests, diagnostics). */
  onEvidence?: (evidence: TokenRiskEvidence) => void;
}

/** The OpenAPI description of POST /api/token-risk: the scoring rules in short. */
export const TOKEN_RISK_DESCRIPTION = [
  'Risk report for a Base token from fresh onchain evidence read over the configured RPC (never from a cache or a stale fallback). 502 when the chain cannot be read, or when the RPC does not say it serves Base (eth_chainId 8453): nothing charged.',
  '',
  'Categories: contract, upgradeability, ownership, privileges, transferSimulation (these decide safety), liquidity and holders (these inform). `risk.coverage` says per category whether it was available, partial or unavailable and why; `risk.breakdown` gives a 0-100 score and findings with stable codes and evidence.',
  '',
  'Evidence: contract code, EIP-1167 clones, EIP-1967 (implementation, admin, beacon) and ZeppelinOS proxy slots, EIP-7702 delegation; owner()/getOwner() (renounced = 0x0 or 0x…dEaD) and enumerable AccessControl admins; privileged selectors in the (implementation) bytecode (mint, pause, blacklist, fee and limit setters, trading gates, upgrade); a buy, a transfer between two fresh accounts and a sell simulated with eth_simulateV1 through the deepest Uniswap v2 pool against WETH or USDC (by the USD value of its quote side), measuring each tax against the pool\'s fair quote; liquidity from fresh market data when configured; the owner\'s, pool\'s and burned shares of the supply.',
  '',
  'Severities: critical = no contract code, not an ERC-20, paused now, sell or transfer reverts (honeypot), any measured tax >= 50%. high = upgradeable/beacon proxy, EIP-7702 account, mint/pause/blacklist function with a live owner or AccessControl roles, buy reverts, tax >= 25%, no market, liquidity < $1,000, owner holds >= 50%, a balance larger than the total supply. medium = fee/limit/trading setters, tax >= 5%, liquidity < $25,000, owner >= 20%, unlocatable logic. low = live owner, tax >= 0.5%, privileged functions nobody can reach (ownership renounced, no AccessControl roles, not upgradeable).',
  '',
  'Decision, first match: BLOCK on any critical finding; INCOMPLETE (score null, level unknown) when contract, upgradeability, ownership, privileges or transferSimulation is not fully available (for example a token without a Uniswap v2 pool, or whose pools are too shallow for a trade to be measured); WARN on any high or medium finding; otherwise ALLOW. Score bands by the highest severity: low 0-24, medium 25-49, high 50-79, critical 80-100 (plus small increments per further finding). Confidence: high with liquidity data (and for BLOCK), medium without, low for INCOMPLETE.',
].join('\n');

function stepOut(s: SimStep, amountIn: bigint, expectedOut: bigint, received: bigint) {
  const done = s.status === 'ok';
  const bps = done ? taxBps(expectedOut, received) : null;
  return {
    status: s.status,
    reason: s.status === 'reverted' ? s.reason : null,
    amountIn: amountIn.toString(),
    expectedOut: expectedOut.toString(),
    received: received.toString(),
    taxPercent: bps === null ? null : percent(bps),
  };
}

function simulationOut(s: SimulationEvidence): TokenRiskReport['simulation'] {
  if (s.status !== 'simulated') return null;
  return {
    dex: s.pool.dex,
    pair: s.pool.pair,
    quote: { symbol: s.pool.quote.symbol, address: s.pool.quote.address, decimals: s.pool.quote.decimals },
    reserves: { token: s.pool.reserveToken.toString(), quote: s.pool.reserveQuote.toString() },
    buyer: s.buyer,
    recipient: s.recipient,
    buy: stepOut(s.buy.step, s.buy.amountIn, s.buy.expectedOut, s.buy.received),
    transfer: stepOut(s.transfer.step, s.transfer.amount, s.transfer.amount, s.transfer.received),
    sell: stepOut(s.sell.step, s.sell.amountIn, s.sell.expectedOut, s.sell.received),
  };
}

/** The paid token-risk report. Throws AppError upstream_unavailable (502) when Base cannot be read. */
export async function tokenRisk(
  chain: ChainClient,
  input: Static<typeof TokenAddressRequest>,
  now: Date,
  opts: TokenRiskOptions = {},
): Promise<TokenRiskReport> {
  const address = getAddress(input.address.toLowerCase()) as Address;
  const { evidence, meter } = await upstream(() => collectEvidence(chain, address, opts));
  opts.onMeter?.(meter);
  opts.onEvidence?.(evidence);
  const { verdict, summary, risk } = scoreTokenRisk(evidence);
  const c = evidence.contract;
  return {
    token: {
      chain: 'base',
      address: evidence.address,
      name: c.name,
      symbol: c.symbol,
      decimals: c.decimals,
      totalSupply: c.totalSupply === null ? null : c.totalSupply.toString(),
      codePresent: c.kind !== 'none',
    },
    verdict,
    summary,
    risk,
    simulation: simulationOut(evidence.simulation),
    blockNumber: evidence.blockNumber === null ? null : Number(evidence.blockNumber),
    network: NETWORK,
    rulesVersion: RULES_VERSION,
    checkedAt: now.toISOString(),
  };
}
