/** The vocabulary of the token-risk report: categories, severities, finding codes. */

export const CATEGORIES = ['contract', 'upgradeability', 'ownership', 'privileges', 'transferSimulation', 'liquidity', 'holders'] as const;
export type Category = (typeof CATEGORIES)[number];

/** Categories that decide safety: a report is never ALLOW unless each of them is fully available. */
export const DECIDING_CATEGORIES: readonly Category[] = ['contract', 'upgradeability', 'ownership', 'privileges', 'transferSimulation'];

export const SEVERITIES = ['info', 'low', 'medium', 'high', 'critical'] as const;
export type Severity = (typeof SEVERITIES)[number];

export const COVERAGE_STATUSES = ['available', 'partial', 'unavailable'] as const;
export type CoverageStatus = (typeof COVERAGE_STATUSES)[number];

export const FINDING_CODES = [
  // contract
  'no_contract_code',
  'not_erc20',
  'minimal_proxy_clone',
  // upgradeability
  'upgradeable_proxy',
  'beacon_proxy',
  'eip7702_delegated_account',
  'implementation_without_code',
  'unknown_delegation',
  'upgrade_function',
  // ownership
  'owner_renounced',
  'owner_active',
  'no_owner_function',
  'owner_unreadable',
  'admin_role_holders',
  'admin_role_empty',
  'admin_roles_not_enumerable',
  // privileges
  'mint_function',
  'pause_function',
  'blacklist_function',
  'fee_setter',
  'limit_setter',
  'trading_gate',
  'transfers_paused',
  // transferSimulation
  'buy_reverts',
  'sell_reverts',
  'transfer_reverts',
  'buy_tax',
  'sell_tax',
  'transfer_tax',
  // liquidity
  'no_market',
  'low_liquidity',
  // holders
  'owner_supply_share',
  'balance_exceeds_supply',
  'supply_distribution',
] as const;
export type FindingCode = (typeof FINDING_CODES)[number];

export type EvidenceValue = string | number | boolean | null | string[];

export interface Finding {
  code: FindingCode;
  severity: Severity;
  title: string;
  evidence: Record<string, EvidenceValue>;
}

export interface Coverage {
  status: CoverageStatus;
  reason: string;
}

export interface CategoryAssessment {
  coverage: Coverage;
  findings: Finding[];
}

export const finding = (code: FindingCode, severity: Severity, title: string, evidence: Record<string, EvidenceValue> = {}): Finding => ({
  code,
  severity,
  title,
  evidence,
});

export const rank = (s: Severity): number => SEVERITIES.indexOf(s);
