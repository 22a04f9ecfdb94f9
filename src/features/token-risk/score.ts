import {
  assessContract,
  assessHolders,
  assessLiquidity,
  assessOwnership,
  assessPrivileges,
  assessSimulation,
  assessUpgradeability,
} from './categories.js';
import type { TokenRiskEvidence } from './evidence.js';
import { CATEGORIES, DECIDING_CATEGORIES, rank, type Category, type CategoryAssessment, type Coverage, type Finding, type Severity } from './findings.js';

/**
 * TOKEN-RISK SCORING RULES (rules version token-risk/1). A pure function of the evidence.
 *
 * Categories: contract, upgradeability, ownership, privileges, transferSimulation (these five
 * DECIDE safety), liquidity and holders (these inform). Each has a coverage
 * (available | partial | unavailable, with a reason) and findings with a stable code, a
 * severity (info < low < medium < high < critical) and evidence.
 *
 * Findings and severities:
 *   contract        no_contract_code CRITICAL (no code: not a token); not_erc20 CRITICAL
 *                   (totalSupply() does not answer); minimal_proxy_clone info (EIP-1167).
 *   upgradeability  upgradeable_proxy HIGH (EIP-1967 or ZeppelinOS implementation slot set);
 *                   beacon_proxy HIGH; eip7702_delegated_account HIGH; implementation_without_code
 *                   HIGH (coverage partial); unknown_delegation MEDIUM (DELEGATECALL to code no
 *                   standard names; coverage partial, privileges unavailable); upgrade_function
 *                   MEDIUM (upgradeTo/upgradeToAndCall without a proxy slot).
 *   ownership       owner_renounced info (owner() or getOwner() is 0x0 or 0x…dEaD, and neither
 *                   names a live account);
 *                   no_owner_function info; owner_active LOW; owner_unreadable MEDIUM (coverage
 *                   partial); admin_role_holders LOW / admin_role_empty info (enumerable
 *                   AccessControl); admin_roles_not_enumerable MEDIUM (coverage partial).
 *   privileges      selectors in the logic bytecode (the implementation's for proxies):
 *                   mint_function, pause_function, blacklist_function HIGH; fee_setter,
 *                   limit_setter, trading_gate MEDIUM. With ownership renounced, no
 *                   AccessControl (role holders other than the admin can still call what their
 *                   role gates) and code that cannot be upgraded, the HIGH ones are MEDIUM: the
 *                   owner's way to them is gone, but a minter or pauser the code keeps in a
 *                   variable of its own is not visible in bytecode, so never ALLOW on them.
 *                   transfers_paused CRITICAL (paused() is true now).
 *   transferSimulation  buy, transfer between two fresh accounts, and sell, simulated with
 *                   eth_simulateV1 through the token's Uniswap v2 pool against WETH or USDC:
 *                   sell_reverts CRITICAL (honeypot); transfer_reverts CRITICAL; buy_reverts
 *                   HIGH; buy_tax, transfer_tax, sell_tax by the measured tax (received vs the
 *                   pool's fair quote): >= 50% CRITICAL (a sell returning almost nothing is a
 *                   honeypot), >= 25% HIGH, >= 5% MEDIUM, >= 0.5% LOW, below that no finding.
 *                   The pool is the deepest one by the USD value of its quote side (pools.ts),
 *                   not the first found. No pool: coverage unavailable. Pools too shallow for
 *                   the probe to measure (a step under 10,000 raw units): coverage partial, no
 *                   finding (missing evidence, never a honeypot). A reverted buy: coverage partial.
 *   liquidity       from fresh market data only: no_market HIGH (the provider says there is no
 *                   pair); low_liquidity HIGH below $1,000, MEDIUM below $25,000, LOW below
 *                   $100,000. No lookup configured, provider failure, stale or empty answers:
 *                   coverage unavailable.
 *   holders         always partial at best (no indexer): owner_supply_share HIGH >= 50%,
 *                   MEDIUM >= 20%, LOW >= 5%; balance_exceeds_supply HIGH (the owner, the pool
 *                   or the burn addresses hold more than totalSupply); supply_distribution info
 *                   (owner, pool, burned).
 *
 * Decision, first rule that applies:
 *   1. BLOCK       any CRITICAL finding (decisive evidence beats missing evidence).
 *   2. INCOMPLETE  a deciding category is not fully available: score null, level unknown.
 *   3. WARN        any HIGH or MEDIUM finding.
 *   4. ALLOW       otherwise (only low and info findings).
 *
 * Score 0..100 (higher is riskier), also per category: the highest severity sets the band,
 * info 0, low 10-24, medium 25-49, high 50-79, critical 80-100; the score is the band's floor
 * plus, for every other finding, critical 10, high 8, medium 4, low 2, info 0, capped at the
 * band's top. Adding a finding never lowers a score, and the level is always the band's name:
 * level low (scores 0-24), medium, high or critical; unknown when INCOMPLETE. A category that is
 * unavailable has score null.
 *
 * Confidence: high for BLOCK, and for ALLOW/WARN when liquidity is available too; medium for
 * ALLOW/WARN without liquidity data; low for INCOMPLETE.
 */

export const RULES_VERSION = 'token-risk/1';

export type Decision = 'ALLOW' | 'WARN' | 'BLOCK' | 'INCOMPLETE';
export type Level = 'low' | 'medium' | 'high' | 'critical' | 'unknown';
export type Confidence = 'high' | 'medium' | 'low';

export interface Verdict {
  decision: Decision;
  level: Level;
  score: number | null;
  confidence: Confidence;
  /** Finding codes that decided (BLOCK, WARN), or `<category>_unavailable`/`_partial` (INCOMPLETE). */
  reasons: string[];
}

export interface Assessment {
  verdict: Verdict;
  summary: string;
  risk: {
    coverage: Record<Category, Coverage>;
    breakdown: Record<Category, { score: number | null; findings: Finding[] }>;
  };
}

const FLOOR: Record<Severity, number> = { info: 0, low: 10, medium: 25, high: 50, critical: 80 };
const CEILING: Record<Severity, number> = { info: 0, low: 24, medium: 49, high: 79, critical: 100 };
const INCREMENT: Record<Severity, number> = { info: 0, low: 2, medium: 4, high: 8, critical: 10 };

export function maxSeverity(findings: Finding[]): Severity | null {
  let max: Severity | null = null;
  for (const f of findings) if (max === null || rank(f.severity) > rank(max)) max = f.severity;
  return max;
}

/** The banded score of a set of findings (see the rules above). */
export function scoreFindings(findings: Finding[]): number {
  const max = maxSeverity(findings);
  if (max === null) return 0;
  const others = findings.reduce((sum, f) => sum + INCREMENT[f.severity], 0) - INCREMENT[max];
  return Math.min(CEILING[max], FLOOR[max] + others);
}

const levelOf = (s: Severity | null): Level => (s === null || s === 'info' || s === 'low' ? 'low' : s);

const ASSESSORS: Record<Category, (e: TokenRiskEvidence) => CategoryAssessment> = {
  contract: assessContract,
  upgradeability: assessUpgradeability,
  ownership: assessOwnership,
  privileges: assessPrivileges,
  transferSimulation: assessSimulation,
  liquidity: assessLiquidity,
  holders: assessHolders,
};

export function scoreTokenRisk(evidence: TokenRiskEvidence): Assessment {
  const coverage = {} as Record<Category, Coverage>;
  const breakdown = {} as Assessment['risk']['breakdown'];
  const all: Finding[] = [];
  for (const category of CATEGORIES) {
    const a = ASSESSORS[category](evidence);
    coverage[category] = a.coverage;
    breakdown[category] = { score: a.coverage.status === 'unavailable' ? null : scoreFindings(a.findings), findings: a.findings };
    all.push(...a.findings);
  }

  const critical = all.filter((f) => f.severity === 'critical');
  const gaps = DECIDING_CATEGORIES.filter((c) => coverage[c].status !== 'available');
  const warnings = all.filter((f) => f.severity === 'high' || f.severity === 'medium');
  const score = scoreFindings(all);
  const risk = { coverage, breakdown };

  if (critical.length) {
    return {
      verdict: { decision: 'BLOCK', level: 'critical', score, confidence: 'high', reasons: unique(critical.map((f) => f.code)) },
      summary: `BLOCK: ${critical.map((f) => f.title).join('; ')}.`,
      risk,
    };
  }
  if (gaps.length) {
    return {
      verdict: { decision: 'INCOMPLETE', level: 'unknown', score: null, confidence: 'low', reasons: gaps.map((c) => `${c}_${coverage[c].status}`) },
      summary: `INCOMPLETE: safety could not be fully checked (${gaps.map((c) => `${c}: ${coverage[c].reason}`).join('; ')}).`,
      risk,
    };
  }
  const confidence: Confidence = coverage.liquidity.status === 'available' ? 'high' : 'medium';
  if (warnings.length) {
    return {
      verdict: { decision: 'WARN', level: levelOf(maxSeverity(all)), score, confidence, reasons: unique(warnings.map((f) => f.code)) },
      summary: `WARN: ${warnings.map((f) => f.title).join('; ')}.`,
      risk,
    };
  }
  return {
    verdict: { decision: 'ALLOW', level: 'low', score, confidence, reasons: [] },
    summary: 'ALLOW: every deciding category was checked and nothing above low severity was found.',
    risk,
  };
}

const unique = (xs: string[]) => [...new Set(xs)];
