import type { PrivilegeKind, SimStep, TokenRiskEvidence, TradeMeasurement, TransferMeasurement } from './evidence.js';
import { finding, type CategoryAssessment, type Coverage, type Finding, type Severity } from './findings.js';

/**
 * One pure assessor per category: evidence in, coverage and findings out. The thresholds and
 * severities here are the ones score.ts documents; change both together.
 */

const DEAD = '0x000000000000000000000000000000000000dead';
const ZERO = '0x0000000000000000000000000000000000000000';
const isBurn = (a: string | null) => a === null || a.toLowerCase() === ZERO || a.toLowerCase() === DEAD;

const available = (reason: string): Coverage => ({ status: 'available', reason });
const partial = (reason: string): Coverage => ({ status: 'partial', reason });
const unavailable = (reason: string): Coverage => ({ status: 'unavailable', reason });
const NO_CODE = unavailable('no contract code at this address');

/** Tax in basis points: how much less than the fair amount arrived (0 when at least the fair amount arrived). */
export function taxBps(expected: bigint, received: bigint): number | null {
  if (expected <= 0n) return null;
  if (received >= expected) return 0;
  // Rounded to the nearest basis point: a 10% fee floored on a token amount reads 10.00%, not 9.99%.
  return Number(((expected - received) * 10_000n + expected / 2n) / expected);
}

/** >= 50% critical (a sell that returns almost nothing is a honeypot), >= 25% high, >= 5% medium, >= 0.5% low. */
export function taxSeverity(bps: number): Severity | null {
  if (bps >= 5000) return 'critical';
  if (bps >= 2500) return 'high';
  if (bps >= 500) return 'medium';
  if (bps >= 50) return 'low';
  return null;
}

/** Basis points as a percent with two decimals, in integers: exact for any size (a share a hostile token inflates to 10^70 %). */
export const percent = (bps: number | bigint): string => {
  const b = BigInt(bps);
  return `${b / 100n}.${(b % 100n).toString().padStart(2, '0')}`;
};

/** Share of supply in basis points (rounded down); above 10,000 when a token reports a balance larger than its supply. */
const shareBps = (part: bigint, total: bigint): bigint => (part * 10_000n) / total;

const isUpgradeable = (e: TokenRiskEvidence) =>
  e.contract.kind === 'eip7702' ||
  e.upgradeability.eip1967.implementation !== null ||
  e.upgradeability.eip1967.beacon !== null ||
  e.upgradeability.zeppelinos.implementation !== null ||
  e.upgradeability.unknownDelegation;

export function assessContract(e: TokenRiskEvidence): CategoryAssessment {
  if (e.contract.kind === 'none') {
    return {
      coverage: available('the address was read: it holds no code'),
      findings: [finding('no_contract_code', 'critical', 'No contract code at this address: it is not a token (an externally owned account or a destroyed contract)', { address: e.address })],
    };
  }
  const findings: Finding[] = [];
  if (e.contract.totalSupply === null) {
    findings.push(finding('not_erc20', 'critical', 'The contract does not answer totalSupply(): it does not behave as an ERC-20 token', { address: e.address }));
  }
  if (e.contract.cloneOf) {
    findings.push(finding('minimal_proxy_clone', 'info', 'EIP-1167 minimal proxy: a fixed (non-upgradeable) clone of its implementation', { implementation: e.contract.cloneOf }));
  }
  return { coverage: available(`contract code read (${e.contract.codeSize} bytes)`), findings };
}

export function assessUpgradeability(e: TokenRiskEvidence): CategoryAssessment {
  if (e.contract.kind === 'none') return { coverage: NO_CODE, findings: [] };
  const u = e.upgradeability;
  const findings: Finding[] = [];
  let coverage = available('EIP-1967 and ZeppelinOS proxy slots, EIP-1167 and EIP-7702 patterns checked');
  const upgradeSelectors = [...u.upgradeSelectors];
  if (e.contract.kind === 'eip7702') {
    findings.push(finding('eip7702_delegated_account', 'high', "An EIP-7702 delegated account: the account's key can point it at other code at any time", { delegate: e.contract.delegate }));
  }
  if (u.eip1967.implementation) {
    findings.push(finding('upgradeable_proxy', 'high', 'EIP-1967 upgradeable proxy: its admin can replace the token logic', { standard: 'EIP-1967', implementation: u.eip1967.implementation, admin: u.eip1967.admin, upgradeSelectors }));
  } else if (u.eip1967.beacon) {
    findings.push(finding('beacon_proxy', 'high', "EIP-1967 beacon proxy: the beacon's owner can replace the token logic", { beacon: u.eip1967.beacon, implementation: u.beaconImplementation }));
    if (!u.beaconImplementation) coverage = partial('the beacon did not name an implementation');
  } else if (u.zeppelinos.implementation) {
    findings.push(finding('upgradeable_proxy', 'high', 'ZeppelinOS upgradeable proxy: its admin can replace the token logic', { standard: 'ZeppelinOS', implementation: u.zeppelinos.implementation, admin: u.zeppelinos.admin, upgradeSelectors }));
  } else if (upgradeSelectors.length && e.contract.kind === 'contract' && !e.contract.cloneOf) {
    findings.push(finding('upgrade_function', 'medium', 'The code has upgrade functions (UUPS) although no proxy slot is set', { selectors: upgradeSelectors }));
  }
  if (u.logic && u.logic.source !== 'token' && u.logic.codeSize === 0 && !(u.logic.source === 'eip1967-beacon' && !u.beaconImplementation)) {
    findings.push(finding('implementation_without_code', 'high', 'The code the token delegates to is empty', { implementation: u.logic.address, source: u.logic.source }));
    coverage = partial('the implementation has no code');
  }
  if (u.unknownDelegation) {
    findings.push(finding('unknown_delegation', 'medium', 'The contract forwards calls (DELEGATECALL) to code that no known proxy standard names', { address: e.address }));
    coverage = partial('the contract delegates to code this report cannot locate');
  }
  return { coverage, findings };
}

export function assessOwnership(e: TokenRiskEvidence): CategoryAssessment {
  if (e.contract.kind === 'none') return { coverage: NO_CODE, findings: [] };
  const o = e.ownership;
  const findings: Finding[] = [];
  let coverage = available('owner() and getOwner() read; AccessControl admin role checked');
  if (o.malformed) {
    findings.push(finding('owner_unreadable', 'medium', 'owner()/getOwner() answered with something that is not an address'));
    coverage = partial('the owner function answered with something that is not an address');
  } else if (o.owner === null) {
    findings.push(finding('no_owner_function', 'info', 'Neither owner() nor getOwner() answers'));
  } else if (isBurn(o.owner)) {
    findings.push(finding('owner_renounced', 'info', 'Ownership is renounced (zero or dead address)', { owner: o.owner, function: o.ownerFunction }));
  } else {
    findings.push(finding('owner_active', 'low', 'The token has a live owner', { owner: o.owner, function: o.ownerFunction, ownerIsContract: o.ownerIsContract }));
  }
  const ac = o.accessControl;
  if (ac.present || (ac.adminCount ?? 0) > 0) {
    if (ac.adminCount === null) {
      findings.push(finding('admin_roles_not_enumerable', 'medium', 'AccessControl is used but the DEFAULT_ADMIN_ROLE holders cannot be listed on chain'));
      coverage = partial('AccessControl admin role holders cannot be enumerated on chain');
    } else if (ac.adminCount === 0) {
      findings.push(finding('admin_role_empty', 'info', 'AccessControl DEFAULT_ADMIN_ROLE has no holder', { count: 0 }));
    } else {
      findings.push(finding('admin_role_holders', 'low', 'AccessControl DEFAULT_ADMIN_ROLE holders', { count: ac.adminCount, admins: ac.admins }));
    }
  }
  return { coverage, findings };
}

const PRIVILEGE_FINDINGS: Record<Exclude<PrivilegeKind, 'upgrade'>, { code: Finding['code']; severity: Severity; title: string }> = {
  mint: { code: 'mint_function', severity: 'high', title: 'A privileged account can mint new tokens' },
  pause: { code: 'pause_function', severity: 'high', title: 'A privileged account can pause all transfers' },
  blacklist: { code: 'blacklist_function', severity: 'high', title: 'A privileged account can block chosen holders' },
  fee: { code: 'fee_setter', severity: 'medium', title: 'A privileged account can change transfer fees or exemptions' },
  limit: { code: 'limit_setter', severity: 'medium', title: 'A privileged account can change transaction or wallet limits' },
  trading: { code: 'trading_gate', severity: 'medium', title: 'A privileged account controls whether trading is open' },
};

export function assessPrivileges(e: TokenRiskEvidence): CategoryAssessment {
  if (e.contract.kind === 'none') return { coverage: NO_CODE, findings: [] };
  const findings: Finding[] = [];
  if (e.contract.paused === true) {
    findings.push(finding('transfers_paused', 'critical', 'The token is paused right now: transfers fail', { paused: true }));
  }
  if (!e.privileges.scanned) {
    return { coverage: unavailable("the token's logic code could not be located or is empty"), findings };
  }
  const o = e.ownership;
  const ac = o.accessControl;
  // Renounced ownership (and no AccessControl, code that cannot be replaced) takes the owner's
  // way to these functions away, not every way: a minter, pauser or blacklister kept in a
  // variable of its own (FiatToken's masterMinter, say) still calls them, and bytecode cannot
  // show which account a function checks. So renouncing lowers a HIGH privilege to MEDIUM only:
  // still WARN, never ALLOW. With AccessControl, an empty DEFAULT_ADMIN_ROLE only stops role
  // administration: holders of MINTER_ROLE, PAUSER_ROLE or any role the token defines keep
  // calling the functions their role gates.
  const accessControl = ac.present || ac.adminCount !== null;
  const renounced = o.owner !== null && isBurn(o.owner) && !o.malformed && !accessControl && !isUpgradeable(e);
  const byKind = new Map<Exclude<PrivilegeKind, 'upgrade'>, string[]>();
  for (const s of e.privileges.selectors) {
    if (s.kind === 'upgrade') continue;
    byKind.set(s.kind, [...(byKind.get(s.kind) ?? []), `${s.selector} ${s.signature}`]);
  }
  for (const [kind, selectors] of byKind) {
    const f = PRIVILEGE_FINDINGS[kind];
    const title = renounced ? `${f.title}; ownership is renounced, but another account may still hold this power` : f.title;
    const severity = renounced && f.severity === 'high' ? 'medium' : f.severity;
    // controllable: true when the owner, an admin role or an upgrade can reach it; 'unknown' when only an account the code keeps elsewhere could.
    findings.push(finding(f.code, severity, title, { selectors, controllable: renounced ? 'unknown' : true }));
  }
  return { coverage: available(`bytecode of the ${e.upgradeability.logic?.source === 'token' ? 'token' : 'implementation'} scanned for privileged selectors`), findings };
}

const stepEvidence = (s: SimStep) => (s.status === 'reverted' ? s.reason : null);

function tradeFindings(kind: 'buy' | 'sell', m: TradeMeasurement, quote: string): Finding[] {
  if (m.step.status === 'skipped') return [];
  if (m.step.status === 'reverted') {
    return kind === 'buy'
      ? [finding('buy_reverts', 'high', 'A simulated buy through the pool reverted', { reason: stepEvidence(m.step), amountIn: m.amountIn.toString(), quote })]
      : [finding('sell_reverts', 'critical', 'Honeypot: a simulated sell into the pool reverted', { reason: stepEvidence(m.step), amountIn: m.amountIn.toString(), quote })];
  }
  const bps = taxBps(m.expectedOut, m.received);
  const severity = bps === null ? null : taxSeverity(bps);
  if (bps === null || !severity) return [];
  const title = kind === 'sell' && severity === 'critical' ? 'Honeypot: a simulated sell returns almost nothing' : `Measured ${kind} tax`;
  return [
    finding(`${kind}_tax`, severity, title, {
      taxPercent: percent(bps),
      taxBps: bps,
      amountIn: m.amountIn.toString(),
      expectedOut: m.expectedOut.toString(),
      received: m.received.toString(),
      quote,
    }),
  ];
}

function transferFindings(m: TransferMeasurement): Finding[] {
  if (m.step.status === 'skipped') return [];
  if (m.step.status === 'reverted') {
    return [finding('transfer_reverts', 'critical', 'A simulated transfer between two fresh accounts failed', { reason: stepEvidence(m.step), amount: m.amount.toString() })];
  }
  const bps = taxBps(m.amount, m.received);
  const severity = bps === null ? null : taxSeverity(bps);
  if (bps === null || !severity) return [];
  return [finding('transfer_tax', severity, 'Measured transfer tax', { taxPercent: percent(bps), taxBps: bps, amount: m.amount.toString(), received: m.received.toString() })];
}

export function assessSimulation(e: TokenRiskEvidence): CategoryAssessment {
  if (e.contract.kind === 'none') return { coverage: NO_CODE, findings: [] };
  const s = e.simulation;
  if (s.status === 'not_applicable') return { coverage: unavailable('the contract does not behave as an ERC-20 token'), findings: [] };
  if (s.status === 'no_pool') {
    return { coverage: unavailable(`no Uniswap v2 pool with reserves against ${s.checkedQuotes.join(' or ')}: buys and sells cannot be simulated`), findings: [] };
  }
  if (s.status === 'pool_too_shallow') {
    // A pool too small for a trade to measure anything is missing evidence, never a honeypot.
    const pools = s.pools.map((p) => `${p.quote} pool ${p.pair} (${usdc(p.quoteValueUsdc)} USD on the ${p.quote} side)`).join(', ');
    return { coverage: partial(`the Uniswap v2 pool is too shallow to measure a buy, transfer and sell: ${pools}`), findings: [] };
  }
  const quote = s.pool.quote.symbol;
  const findings = [...tradeFindings('buy', s.buy, quote), ...transferFindings(s.transfer), ...tradeFindings('sell', s.sell, quote)];
  const skipped = [s.buy, s.transfer, s.sell].some((m) => m.step.status === 'skipped');
  const coverage = skipped
    ? partial(s.buy.step.status === 'reverted' ? 'the buy reverted, so the sell and the transfer could not be simulated' : 'the buy delivered no tokens, so the sell and the transfer could not be simulated')
    : available(`buy, transfer and sell simulated with eth_simulateV1 through the ${quote} pool ${s.pool.pair}`);
  return { coverage, findings };
}

export function assessLiquidity(e: TokenRiskEvidence): CategoryAssessment {
  const l = e.liquidity;
  switch (l.status) {
    case 'not_configured':
      return { coverage: unavailable('no market data source is configured'), findings: [] };
    case 'failed':
      return { coverage: unavailable('the market data providers did not answer'), findings: [] };
    case 'stale':
      return { coverage: unavailable('only stale market data was available, and paid reports never use it'), findings: [] };
    case 'empty':
      return { coverage: unavailable('the provider returned an empty pair list, which does not prove there is no market'), findings: [] };
    case 'none':
      return { coverage: available('the market data provider reports no Base trading pair'), findings: [finding('no_market', 'high', 'No Base trading pair: the token cannot be sold on a DEX')] };
    case 'ok': {
      if (l.liquidityUsd === null) return { coverage: partial(`${l.provider} reported no liquidity figure`), findings: [] };
      const usd = wholeUsd(l.liquidityUsd);
      const severity: Severity | null = usd < 1_000n ? 'high' : usd < 25_000n ? 'medium' : usd < 100_000n ? 'low' : null;
      const findings = severity
        ? [finding('low_liquidity', severity, 'Low DEX liquidity: a sale of size moves the price a lot', { liquidityUsd: l.liquidityUsd, provider: l.provider, fetchedAt: l.fetchedAt })]
        : [];
      return { coverage: available(`liquidity from ${l.provider} fetched at ${l.fetchedAt}`), findings };
    }
  }
}

/** USDC micro-units as a decimal string with cents (rounded down). */
const usdc = (micro: bigint): string => `${micro / 1_000_000n}.${String((micro % 1_000_000n) / 10_000n).padStart(2, '0')}`;

/** The integer part of a non-negative decimal string (never a float); garbage reads as 0. */
export function wholeUsd(decimal: string): bigint {
  const m = /^\s*(\d+)(?:\.\d*)?\s*$/.exec(decimal);
  return m ? BigInt(m[1]!) : 0n;
}

export function assessHolders(e: TokenRiskEvidence): CategoryAssessment {
  if (e.contract.kind === 'none') return { coverage: NO_CODE, findings: [] };
  const h = e.holders;
  if (h.totalSupply === null || h.totalSupply === 0n) return { coverage: unavailable('the total supply is unknown or zero'), findings: [] };
  const findings: Finding[] = [];
  const ownerBps = h.owner === null ? null : shareBps(h.owner, h.totalSupply);
  if (ownerBps !== null) {
    const severity: Severity | null = ownerBps >= 5000n ? 'high' : ownerBps >= 2000n ? 'medium' : ownerBps >= 500n ? 'low' : null;
    if (severity) findings.push(finding('owner_supply_share', severity, 'The owner holds a large share of the supply', { owner: e.ownership.owner, sharePercent: percent(ownerBps), balance: h.owner!.toString() }));
  }
  const overSupply = (['owner', 'pool', 'burned'] as const).filter((holder) => (h[holder] ?? 0n) > h.totalSupply!);
  if (overSupply.length > 0) {
    findings.push(
      finding('balance_exceeds_supply', 'high', "A balance is larger than the token's total supply: its accounting cannot be trusted", {
        holders: overSupply,
        totalSupply: h.totalSupply.toString(),
      }),
    );
  }
  findings.push(
    finding('supply_distribution', 'info', 'Known shares of the supply', {
      totalSupply: h.totalSupply.toString(),
      ownerSharePercent: ownerBps === null ? null : percent(ownerBps),
      poolSharePercent: h.pool === null ? null : percent(shareBps(h.pool, h.totalSupply)),
      burnedSharePercent: h.burned === null ? null : percent(shareBps(h.burned, h.totalSupply)),
    }),
  );
  return { coverage: partial("only the owner's, the pool's and the burn addresses' shares are known; the full distribution needs an indexer"), findings };
}
