import { describe, expect, it } from 'vitest';
import type { Address } from 'viem';
import { percent, taxBps, taxSeverity, wholeUsd } from '../../src/features/token-risk/categories.js';
import { ownerOf } from '../../src/features/token-risk/collect.js';
import type { TokenRiskEvidence } from '../../src/features/token-risk/evidence.js';
import { CATEGORIES, DECIDING_CATEGORIES, FINDING_CODES, finding, type Category, type Finding, type Severity } from '../../src/features/token-risk/findings.js';
import { scoreFindings, scoreTokenRisk, type Assessment } from '../../src/features/token-risk/score.js';
import { TokenRiskReport } from '../../src/features/token-risk/schemas.js';
import { expectMatchesSchema } from '../helpers/schema.js';
import { ADMIN, cleanEvidence, DEAD, evidenceWith, IMPL, liveOwner, OWNER, PAIR, selectorsOf, taxed, ZERO } from './token-risk-evidence.js';

/** Every finding code any test produced: the last test checks the vocabulary is fully exercised. */
const produced = new Set<string>();
function score(e: TokenRiskEvidence): Assessment {
  const a = scoreTokenRisk(e);
  // What the report publishes of the assessment, with nothing its schema does not declare.
  const { verdict, summary, risk } = TokenRiskReport.properties;
  expectMatchesSchema(verdict, a.verdict);
  expectMatchesSchema(summary, a.summary);
  expectMatchesSchema(risk, a.risk);
  for (const c of CATEGORIES) for (const f of a.risk.breakdown[c].findings) produced.add(f.code);
  return a;
}
const codes = (a: Assessment) => CATEGORIES.flatMap((c) => a.risk.breakdown[c].findings.map((f) => f.code));
const findingOf = (a: Assessment, code: string) => CATEGORIES.flatMap((c) => a.risk.breakdown[c].findings).find((f) => f.code === code);
const E18 = 10n ** 18n;
const sim = () => {
  const s = cleanEvidence().simulation;
  if (s.status !== 'simulated') throw new Error('fixture');
  return s;
};

describe('token-risk verdict precedence', () => {
  it('a clean, fully checked token is ALLOW, low, score 0; medium confidence without liquidity data', () => {
    const a = score(cleanEvidence());
    expect(a.verdict).toEqual({ decision: 'ALLOW', level: 'low', score: 0, confidence: 'medium', reasons: [] });
    expect(a.risk.coverage.liquidity).toEqual({ status: 'unavailable', reason: 'no market data source is configured' });
    expect(codes(a).sort()).toEqual(['owner_renounced', 'supply_distribution']);
  });

  it('with fresh liquidity data of $100,000 or more, ALLOW has high confidence', () => {
    const a = score(evidenceWith({ liquidity: { status: 'ok', provider: 'dexscreener', fetchedAt: '2026-01-01T00:00:00.000Z', liquidityUsd: '100000', pairs: [] } }));
    expect(a.verdict).toMatchObject({ decision: 'ALLOW', confidence: 'high', score: 0 });
    expect(a.risk.coverage.liquidity.status).toBe('available');
  });

  const criticals: Array<[string, Parameters<typeof evidenceWith>[0]]> = [
    ['not_erc20', { contract: { totalSupply: null } }],
    ['transfers_paused', { contract: { paused: true } }],
    ['sell_reverts', { simulation: { sell: { ...sim().sell, step: { status: 'reverted', reason: 'TransferHelper: TRANSFER_FROM_FAILED' } } } }],
    ['transfer_reverts', { simulation: { transfer: { ...sim().transfer, step: { status: 'reverted', reason: null } } } }],
    ['sell_tax', { simulation: { sell: { ...sim().sell, received: taxed(sim().sell.expectedOut, 50) } } }],
    ['buy_tax', { simulation: { buy: { ...sim().buy, received: 0n } } }],
    ['transfer_tax', { simulation: { transfer: { ...sim().transfer, received: taxed(sim().transfer.amount, 75) } } }],
  ];
  it.each(criticals)('%s is critical and BLOCKs with high confidence', (code, patch) => {
    const a = score(evidenceWith(patch));
    expect(a.verdict.decision).toBe('BLOCK');
    expect(a.verdict.level).toBe('critical');
    expect(a.verdict.confidence).toBe('high');
    expect(a.verdict.score).toBeGreaterThanOrEqual(80);
    expect(a.verdict.reasons).toContain(code);
    expect(findingOf(a, code)!.severity).toBe('critical');
  });

  it('an address without code is BLOCK no_contract_code, with every other code-based category unavailable', () => {
    const a = score(evidenceWith({ contract: { kind: 'none', codeSize: 0, totalSupply: null, decimals: null, name: null, symbol: null }, simulation: { status: 'not_applicable' }, blockNumber: 5n }));
    expect(a.verdict).toEqual({ decision: 'BLOCK', level: 'critical', score: 80, confidence: 'high', reasons: ['no_contract_code'] });
    for (const c of ['upgradeability', 'ownership', 'privileges', 'transferSimulation', 'holders'] as const) {
      expect(a.risk.coverage[c]).toEqual({ status: 'unavailable', reason: 'no contract code at this address' });
      expect(a.risk.breakdown[c]).toEqual({ score: null, findings: [] });
    }
    expect(findingOf(a, 'no_contract_code')!.evidence).toEqual({ address: '0x1111111111111111111111111111111111111111' });
  });

  it('decisive negative evidence beats missing evidence: a honeypot with unreadable ownership is BLOCK, not INCOMPLETE', () => {
    const a = score(evidenceWith({ ownership: { malformed: true, owner: null }, simulation: { sell: { ...sim().sell, step: { status: 'reverted', reason: null } } } }));
    expect(a.risk.coverage.ownership.status).toBe('partial');
    expect(a.verdict.decision).toBe('BLOCK');
  });

  const gaps: Array<[string, string, Parameters<typeof evidenceWith>[0]]> = [
    ['upgradeability', 'partial', { upgradeability: { unknownDelegation: true }, privileges: { scanned: false, selectors: [] } }],
    ['upgradeability', 'partial', { upgradeability: { eip1967: { implementation: IMPL, admin: ADMIN, beacon: null }, logic: { address: IMPL, source: 'eip1967', codeSize: 0 } }, privileges: { scanned: false, selectors: [] } }],
    ['upgradeability', 'partial', { upgradeability: { eip1967: { implementation: null, admin: null, beacon: IMPL }, beaconImplementation: null, logic: { address: IMPL, source: 'eip1967-beacon', codeSize: 0 } }, privileges: { scanned: false, selectors: [] } }],
    ['ownership', 'partial', { ownership: { owner: null, ownerFunction: null, malformed: true } }],
    ['ownership', 'partial', { ownership: { accessControl: { present: true, enumerable: false, adminCount: null, admins: [] } } }],
    ['privileges', 'unavailable', { privileges: { scanned: false, selectors: [] } }],
    ['transferSimulation', 'unavailable', { simulation: { status: 'no_pool', checkedQuotes: ['WETH', 'USDC'] } }],
    ['transferSimulation', 'partial', { simulation: { status: 'pool_too_shallow', pools: [{ pair: PAIR, quote: 'WETH', reserveToken: E18, reserveQuote: 100n, quoteValueUsdc: 0n }] } }],
    ['transferSimulation', 'partial', { simulation: { buy: { ...sim().buy, step: { status: 'reverted', reason: 'TRADING_CLOSED' }, received: 0n }, transfer: { ...sim().transfer, step: { status: 'skipped' } }, sell: { ...sim().sell, step: { status: 'skipped' } } } }],
  ];
  it.each(gaps)('a %s coverage of %s is INCOMPLETE with a null score, never ALLOW or WARN', (category, status, patch) => {
    const a = score(evidenceWith(patch));
    expect(a.risk.coverage[category as 'ownership'].status).toBe(status);
    expect(a.verdict).toMatchObject({ decision: 'INCOMPLETE', level: 'unknown', score: null, confidence: 'low' });
    expect(a.verdict.reasons).toContain(`${category}_${status}`);
    expect(a.summary).toMatch(/^INCOMPLETE: /);
    expect(a.summary).toContain(a.risk.coverage[category as 'ownership'].reason);
  });

  it('no deciding category can be missing without the decision becoming INCOMPLETE (or BLOCK)', () => {
    // Force each deciding category in turn through the scorer's own coverage by stubbing evidence.
    const stubs: Partial<Record<Category, Parameters<typeof evidenceWith>[0]>> = {
      contract: {}, // contract is always read (an unreadable chain is a 502, not a report)
      upgradeability: { upgradeability: { unknownDelegation: true } },
      ownership: { ownership: { malformed: true, owner: null } },
      privileges: { privileges: { scanned: false, selectors: [] } },
      transferSimulation: { simulation: { status: 'no_pool', checkedQuotes: ['WETH'] } },
    };
    for (const c of DECIDING_CATEGORIES) {
      const a = score(evidenceWith(stubs[c]!));
      if (a.risk.coverage[c].status === 'available') continue;
      expect(['INCOMPLETE', 'BLOCK']).toContain(a.verdict.decision);
    }
  });

  it.each([
    [{ status: 'not_configured' as const }, 'no market data source is configured'],
    [{ status: 'failed' as const }, 'the market data providers did not answer'],
    [{ status: 'stale' as const }, 'only stale market data was available, and paid reports never use it'],
    [{ status: 'empty' as const }, 'the provider returned an empty pair list, which does not prove there is no market'],
  ])('informative gaps do not block ALLOW: liquidity %o', (liquidity, reason) => {
    const a = score(evidenceWith({ liquidity }));
    expect(a.risk.coverage.liquidity).toEqual({ status: 'unavailable', reason });
    expect(a.risk.breakdown.liquidity.score).toBeNull();
    expect(a.verdict).toMatchObject({ decision: 'ALLOW', confidence: 'medium' });
  });

  it('holders are never better than partial, and unavailable without a total supply, without affecting ALLOW', () => {
    expect(score(cleanEvidence()).risk.coverage.holders.status).toBe('partial');
    const a = score(evidenceWith({ contract: { totalSupply: 0n }, holders: { totalSupply: 0n } }));
    expect(a.risk.coverage.holders.status).toBe('unavailable');
    expect(a.verdict.decision).toBe('ALLOW');
  });
});

describe('privileged functions', () => {
  const kinds: Array<[Parameters<typeof selectorsOf>[0], string, Severity]> = [
    ['mint', 'mint_function', 'high'],
    ['pause', 'pause_function', 'high'],
    ['blacklist', 'blacklist_function', 'high'],
    ['fee', 'fee_setter', 'medium'],
    ['limit', 'limit_setter', 'medium'],
    ['trading', 'trading_gate', 'medium'],
  ];
  it.each(kinds)('%s with a live owner is %s (%s) and WARNs', (kind, code, severity) => {
    const a = score(evidenceWith({ ownership: liveOwner, privileges: { scanned: true, selectors: selectorsOf(kind) } }));
    const f = findingOf(a, code)!;
    expect(f.severity).toBe(severity);
    expect(f.evidence.controllable).toBe(true);
    expect((f.evidence.selectors as string[])[0]).toMatch(/^0x[0-9a-f]{8} \w+\(/);
    expect(a.verdict).toMatchObject({ decision: 'WARN', level: severity });
    expect(a.verdict.reasons).toContain(code);
  });

  // A minter or pauser kept in a variable of its own still calls them after the owner renounced
  // (a review's HiddenMinter: ALLOW while its minter kept minting), and bytecode cannot tell.
  it.each(kinds)('%s is at most one step lower, never below medium, and still WARNs when ownership is renounced', (kind, code) => {
    for (const owner of [ZERO, DEAD, DEAD.toLowerCase() as Address]) {
      const a = score(evidenceWith({ ownership: { owner }, privileges: { scanned: true, selectors: selectorsOf(kind) } }));
      expect(findingOf(a, code)).toMatchObject({ severity: 'medium', evidence: { controllable: 'unknown' } });
      expect(findingOf(a, code)!.title).toMatch(/renounced, but another account may still hold this power/);
      expect(a.verdict).toMatchObject({ decision: 'WARN', level: 'medium' });
    }
  });

  it('a renounced owner does not make functions inert when the code is upgradeable, AccessControl is used, or there is no owner function', () => {
    const mint = { privileges: { scanned: true, selectors: selectorsOf('mint') } };
    const cases: Array<Parameters<typeof evidenceWith>[0]> = [
      { ...mint, upgradeability: { eip1967: { implementation: IMPL, admin: ADMIN, beacon: null }, logic: { address: IMPL, source: 'eip1967', codeSize: 900 } } },
      { ...mint, upgradeability: { zeppelinos: { implementation: IMPL, admin: ADMIN }, logic: { address: IMPL, source: 'zeppelinos', codeSize: 900 } } },
      { ...mint, upgradeability: { eip1967: { implementation: null, admin: null, beacon: ADMIN }, beaconImplementation: IMPL, logic: { address: IMPL, source: 'eip1967-beacon', codeSize: 900 } } },
      { ...mint, ownership: { accessControl: { present: true, enumerable: true, adminCount: 1, admins: [ADMIN] } } },
      { ...mint, ownership: { accessControl: { present: false, enumerable: true, adminCount: 2, admins: [ADMIN, OWNER] } } },
      { ...mint, ownership: { owner: null, ownerFunction: null } },
      { ...mint, contract: { kind: 'eip7702', delegate: IMPL } },
      // An empty DEFAULT_ADMIN_ROLE stops role administration only: MINTER_ROLE holders still mint.
      { ...mint, ownership: { accessControl: { present: true, enumerable: true, adminCount: 0, admins: [] } } },
      { ...mint, ownership: { accessControl: { present: false, enumerable: true, adminCount: 0, admins: [] } } },
    ];
    for (const patch of cases) expect(findingOf(score(evidenceWith(patch)), 'mint_function')).toMatchObject({ severity: 'high', evidence: { controllable: true } });
  });

  // The collector never produces these combinations today (a malformed answer leaves owner null;
  // unknown delegation leaves privileges unscanned), but the pure rule must not rely on that: a
  // zero owner read from a malformed answer, or code that delegates where no standard says, is
  // no evidence that the owner's way to a privileged function is gone.
  it('a burn-address owner does not lower a HIGH privilege when the owner answer was malformed or the code delegates to unknown code', () => {
    const mint = { privileges: { scanned: true, selectors: selectorsOf('mint') } };
    const cases: Array<Parameters<typeof evidenceWith>[0]> = [
      { ...mint, ownership: { owner: ZERO, malformed: true } },
      { ...mint, upgradeability: { unknownDelegation: true } },
    ];
    for (const patch of cases) expect(findingOf(score(evidenceWith(patch)), 'mint_function')).toMatchObject({ severity: 'high', evidence: { controllable: true } });
  });

  it('mint, pause and blacklist behind AccessControl with the admin role renounced are WARN, never ALLOW (R5 #5)', () => {
    const a = score(evidenceWith({ ownership: { accessControl: { present: true, enumerable: true, adminCount: 0, admins: [] } }, privileges: { scanned: true, selectors: selectorsOf('mint', 'pause', 'blacklist') } }));
    expect(a.verdict).toMatchObject({ decision: 'WARN', level: 'high' });
    expect(a.verdict.reasons).toEqual(expect.arrayContaining(['mint_function', 'pause_function', 'blacklist_function']));
    expect(findingOf(a, 'admin_role_empty')).toBeDefined();
  });

  it('groups several selectors of one kind into one finding', () => {
    const a = score(evidenceWith({ ownership: liveOwner, privileges: { scanned: true, selectors: selectorsOf('pause', 'pause', 'blacklist') } }));
    expect(codes(a).filter((c) => c === 'pause_function')).toHaveLength(1);
    expect(findingOf(a, 'pause_function')!.evidence.selectors).toHaveLength(2);
  });
});

describe('measured taxes', () => {
  it('taxBps rounds to the nearest basis point and never goes negative', () => {
    expect(taxBps(1000n, 900n)).toBe(1000);
    expect(taxBps(10_000_000n, 9_000_001n)).toBe(1000);
    expect(taxBps(3n, 2n)).toBe(3333);
    expect(taxBps(100n, 150n)).toBe(0);
    expect(taxBps(0n, 0n)).toBeNull();
    expect(percent(999)).toBe('9.99');
    expect(percent(5)).toBe('0.05');
    expect(percent(10_000)).toBe('100.00');
  });

  it.each([
    [0, null],
    [49, null],
    [50, 'low'],
    [499, 'low'],
    [500, 'medium'],
    [2499, 'medium'],
    [2500, 'high'],
    [4999, 'high'],
    [5000, 'critical'],
    [10_000, 'critical'],
  ])('a tax of %i bps is %s', (bps, severity) => {
    expect(taxSeverity(bps)).toBe(severity);
  });

  it.each([
    ['buy', 0.49, null, 'ALLOW'],
    ['buy', 0.5, 'low', 'ALLOW'],
    ['sell', 4.99, 'low', 'ALLOW'],
    ['sell', 5, 'medium', 'WARN'],
    ['transfer', 10, 'medium', 'WARN'],
    ['buy', 25, 'high', 'WARN'],
    ['sell', 49.99, 'high', 'WARN'],
    ['sell', 50, 'critical', 'BLOCK'],
    ['buy', 99, 'critical', 'BLOCK'],
  ] as const)('a %s tax of %s%% gives %s and %s, with the measured tax as evidence', (kind, pct, severity, decision) => {
    const s = sim();
    const patch =
      kind === 'transfer'
        ? { simulation: { transfer: { ...s.transfer, received: taxed(s.transfer.amount, pct) } } }
        : { simulation: { [kind]: { ...s[kind], received: taxed(s[kind].expectedOut, pct) } } };
    const a = score(evidenceWith(patch as never));
    const f = findingOf(a, `${kind}_tax`);
    if (severity === null) expect(f).toBeUndefined();
    else {
      expect(f!.severity).toBe(severity);
      expect(f!.evidence.taxPercent).toBe(percent(Math.round(pct * 100)));
      expect(f!.evidence.taxBps).toBe(Math.round(pct * 100));
    }
    expect(a.verdict.decision).toBe(decision);
  });

  it('a reverted buy is a high finding, and the untested sell keeps the report INCOMPLETE', () => {
    const s = sim();
    const a = score(evidenceWith({ simulation: { buy: { ...s.buy, step: { status: 'reverted', reason: 'Pausable: paused' }, received: 0n }, transfer: { ...s.transfer, step: { status: 'skipped' } }, sell: { ...s.sell, step: { status: 'skipped' } } } }));
    expect(findingOf(a, 'buy_reverts')).toMatchObject({ severity: 'high', evidence: { reason: 'Pausable: paused', quote: 'WETH' } });
    expect(a.risk.coverage.transferSimulation.reason).toMatch(/buy reverted/);
    expect(a.verdict.decision).toBe('INCOMPLETE');
  });

  it('a transfer that could not be simulated leaves the simulation partial (INCOMPLETE), even with buy and sell measured', () => {
    const a = score(evidenceWith({ simulation: { transfer: { ...sim().transfer, step: { status: 'skipped' }, received: 0n } } }));
    expect(a.risk.coverage.transferSimulation.status).toBe('partial');
    expect(a.verdict).toMatchObject({ decision: 'INCOMPLETE', reasons: ['transferSimulation_partial'] });
  });

  it('only a sell is titled a honeypot: a critical buy or transfer tax keeps its measured-tax title', () => {
    const s = sim();
    const buy = score(evidenceWith({ simulation: { buy: { ...s.buy, received: taxed(s.buy.expectedOut, 99) } } }));
    expect(findingOf(buy, 'buy_tax')).toMatchObject({ severity: 'critical', title: 'Measured buy tax' });
    expect(buy.summary).toBe('BLOCK: Measured buy tax.');
    const sell = score(evidenceWith({ simulation: { sell: { ...s.sell, received: taxed(s.sell.expectedOut, 99) } } }));
    expect(findingOf(sell, 'sell_tax')).toMatchObject({ severity: 'critical', title: 'Honeypot: a simulated sell returns almost nothing' });
    // Below critical a sell tax is a measured tax like any other.
    const high = score(evidenceWith({ simulation: { sell: { ...s.sell, received: taxed(s.sell.expectedOut, 30) } } }));
    expect(findingOf(high, 'sell_tax')).toMatchObject({ severity: 'high', title: 'Measured sell tax' });
  });

  it('a sell that reverts is titled a honeypot and carries the revert reason', () => {
    const a = score(evidenceWith({ simulation: { sell: { ...sim().sell, step: { status: 'reverted', reason: 'TransferHelper: TRANSFER_FROM_FAILED' } } } }));
    expect(findingOf(a, 'sell_reverts')).toMatchObject({ title: expect.stringMatching(/^Honeypot/), evidence: { reason: 'TransferHelper: TRANSFER_FROM_FAILED' } });
    expect(a.summary).toMatch(/^BLOCK: Honeypot/);
  });
});

describe('upgradeability, contract and ownership findings', () => {
  it('EIP-1967 proxy: upgradeable_proxy (high) with implementation and admin', () => {
    const a = score(evidenceWith({ ownership: liveOwner, upgradeability: { eip1967: { implementation: IMPL, admin: ADMIN, beacon: null }, logic: { address: IMPL, source: 'eip1967', codeSize: 900 }, upgradeSelectors: ['0x3659cfe6'] } }));
    expect(findingOf(a, 'upgradeable_proxy')).toMatchObject({ severity: 'high', evidence: { standard: 'EIP-1967', implementation: IMPL, admin: ADMIN, upgradeSelectors: ['0x3659cfe6'] } });
    expect(a.verdict).toMatchObject({ decision: 'WARN', level: 'high' });
    expect(a.risk.coverage.privileges.reason).toMatch(/implementation/);
  });

  it('ZeppelinOS proxy, beacon proxy and EIP-7702 delegation are high', () => {
    const zos = score(evidenceWith({ upgradeability: { zeppelinos: { implementation: IMPL, admin: ADMIN }, logic: { address: IMPL, source: 'zeppelinos', codeSize: 900 } } }));
    expect(findingOf(zos, 'upgradeable_proxy')).toMatchObject({ severity: 'high', evidence: { standard: 'ZeppelinOS', implementation: IMPL, admin: ADMIN } });
    const beacon = score(evidenceWith({ upgradeability: { eip1967: { implementation: null, admin: null, beacon: ADMIN }, beaconImplementation: IMPL, logic: { address: IMPL, source: 'eip1967-beacon', codeSize: 900 } } }));
    expect(findingOf(beacon, 'beacon_proxy')).toMatchObject({ severity: 'high', evidence: { beacon: ADMIN, implementation: IMPL } });
    expect(beacon.risk.coverage.upgradeability.status).toBe('available');
    const eoa = score(evidenceWith({ contract: { kind: 'eip7702', delegate: IMPL }, upgradeability: { logic: { address: IMPL, source: 'eip7702', codeSize: 900 } } }));
    expect(findingOf(eoa, 'eip7702_delegated_account')).toMatchObject({ severity: 'high', evidence: { delegate: IMPL } });
    for (const a of [zos, beacon, eoa]) expect(a.verdict.decision).toBe('WARN');
  });

  it('an EIP-1167 clone is info only; upgrade selectors without a proxy slot are medium', () => {
    const clone = score(evidenceWith({ contract: { cloneOf: IMPL }, upgradeability: { logic: { address: IMPL, source: 'eip1167', codeSize: 900 } } }));
    expect(findingOf(clone, 'minimal_proxy_clone')).toMatchObject({ severity: 'info', evidence: { implementation: IMPL } });
    expect(clone.verdict.decision).toBe('ALLOW');
    // A clone's code is fixed: UUPS upgrade functions in its implementation cannot replace it.
    const uupsClone = score(evidenceWith({ contract: { cloneOf: IMPL }, upgradeability: { logic: { address: IMPL, source: 'eip1167', codeSize: 900 }, upgradeSelectors: ['0x4f1ef286'] } }));
    expect(findingOf(uupsClone, 'upgrade_function')).toBeUndefined();
    expect(uupsClone.verdict.decision).toBe('ALLOW');
    const uups = score(evidenceWith({ upgradeability: { upgradeSelectors: ['0x4f1ef286'] } }));
    expect(findingOf(uups, 'upgrade_function')).toMatchObject({ severity: 'medium', evidence: { selectors: ['0x4f1ef286'] } });
  });

  it('an EIP-7702 account whose delegate has upgrade functions is reported as the delegation, not as upgrade_function', () => {
    const a = score(evidenceWith({ contract: { kind: 'eip7702', delegate: IMPL }, upgradeability: { logic: { address: IMPL, source: 'eip7702', codeSize: 900 }, upgradeSelectors: ['0x4f1ef286'] } }));
    expect(codes(a)).toContain('eip7702_delegated_account');
    expect(findingOf(a, 'upgrade_function')).toBeUndefined();
    expect(a.verdict.reasons).not.toContain('upgrade_function');
  });

  it('a beacon that names no implementation is partial for that reason, not an implementation without code', () => {
    const a = score(evidenceWith({ upgradeability: { eip1967: { implementation: null, admin: null, beacon: IMPL }, beaconImplementation: null, logic: { address: IMPL, source: 'eip1967-beacon', codeSize: 0 } }, privileges: { scanned: false, selectors: [] } }));
    expect(a.risk.coverage.upgradeability).toEqual({ status: 'partial', reason: 'the beacon did not name an implementation' });
    expect(findingOf(a, 'implementation_without_code')).toBeUndefined();
  });

  it('implementation without code and unknown delegation are reported with the partial coverage', () => {
    const empty = score(evidenceWith({ upgradeability: { eip1967: { implementation: IMPL, admin: null, beacon: null }, logic: { address: IMPL, source: 'eip1967', codeSize: 0 } }, privileges: { scanned: false, selectors: [] } }));
    expect(findingOf(empty, 'implementation_without_code')).toMatchObject({ severity: 'high', evidence: { implementation: IMPL } });
    const unknown = score(evidenceWith({ upgradeability: { unknownDelegation: true }, privileges: { scanned: false, selectors: [] } }));
    expect(findingOf(unknown, 'unknown_delegation')!.severity).toBe('medium');
    expect(unknown.risk.coverage.privileges.status).toBe('unavailable');
  });

  it('ownership: renounced (zero or dead), live with its kind, missing function, unreadable', () => {
    expect(findingOf(score(evidenceWith({ ownership: { owner: DEAD, ownerFunction: 'getOwner()' } })), 'owner_renounced')!.evidence).toEqual({ owner: DEAD, function: 'getOwner()' });
    const live = score(evidenceWith({ ownership: { ...liveOwner, ownerIsContract: true } }));
    expect(findingOf(live, 'owner_active')).toMatchObject({ severity: 'low', evidence: { owner: OWNER, function: 'owner()', ownerIsContract: true } });
    expect(live.verdict.decision).toBe('ALLOW');
    expect(findingOf(score(evidenceWith({ ownership: { owner: null, ownerFunction: null } })), 'no_owner_function')!.severity).toBe('info');
    expect(findingOf(score(evidenceWith({ ownership: { owner: null, ownerFunction: null, malformed: true } })), 'owner_unreadable')!.severity).toBe('medium');
  });

  it('AccessControl: enumerable holders (low) or an empty admin role (info); not enumerable is partial', () => {
    const held = score(evidenceWith({ ownership: { accessControl: { present: true, enumerable: true, adminCount: 2, admins: [ADMIN, OWNER] } } }));
    expect(findingOf(held, 'admin_role_holders')).toMatchObject({ severity: 'low', evidence: { count: 2, admins: [ADMIN, OWNER] } });
    expect(held.verdict.decision).toBe('ALLOW');
    // Holders found by enumeration count even when the AccessControl interface check said no.
    const found = score(evidenceWith({ ownership: { accessControl: { present: false, enumerable: true, adminCount: 1, admins: [ADMIN] } } }));
    expect(findingOf(found, 'admin_role_holders')).toMatchObject({ severity: 'low', evidence: { count: 1, admins: [ADMIN] } });
    expect(findingOf(score(evidenceWith({ ownership: { accessControl: { present: true, enumerable: true, adminCount: 0, admins: [] } } })), 'admin_role_empty')).toBeDefined();
    expect(findingOf(score(evidenceWith({ ownership: { accessControl: { present: true, enumerable: false, adminCount: null, admins: [] } } })), 'admin_roles_not_enumerable')!.severity).toBe('medium');
  });
});

describe('liquidity and holders', () => {
  const ok = (liquidityUsd: string | null) => ({ liquidity: { status: 'ok' as const, provider: 'geckoterminal', fetchedAt: '2026-01-01T00:00:00.000Z', liquidityUsd, pairs: [] } });
  it.each([
    ['0', 'high'],
    ['999.99', 'high'],
    ['1000', 'medium'],
    ['24999.999999', 'medium'],
    ['25000', 'low'],
    ['99999.99', 'low'],
    ['100000', null],
    ['98765432.1', null],
    ['not a number', 'high'],
  ])('liquidity of $%s is %s', (usd, severity) => {
    const a = score(evidenceWith(ok(usd)));
    const f = findingOf(a, 'low_liquidity');
    if (severity === null) expect(f).toBeUndefined();
    else expect(f).toMatchObject({ severity, evidence: { liquidityUsd: usd, provider: 'geckoterminal' } });
  });

  it('wholeUsd reads decimal strings without floats', () => {
    expect(wholeUsd('123456789012345678901234567890.99')).toBe(123456789012345678901234567890n);
    expect(wholeUsd('7')).toBe(7n);
    expect(wholeUsd('-5')).toBe(0n);
    expect(wholeUsd('1e9')).toBe(0n);
  });

  it('a provider without a liquidity figure is partial; an authoritative "no market" is no_market (high)', () => {
    expect(score(evidenceWith(ok(null))).risk.coverage.liquidity.status).toBe('partial');
    expect(score(evidenceWith(ok(null))).verdict).toMatchObject({ decision: 'ALLOW', confidence: 'medium' });
    const none = score(evidenceWith({ liquidity: { status: 'none' } }));
    expect(findingOf(none, 'no_market')!.severity).toBe('high');
    expect(none.verdict).toMatchObject({ decision: 'WARN', confidence: 'high' });
  });

  it('an owner share just under a threshold is not rounded up to it', () => {
    const supply = 1_000_000n * E18;
    const a = score(evidenceWith({ ownership: liveOwner, holders: { owner: (supply * 49_996n) / 100_000n } }));
    expect(findingOf(a, 'owner_supply_share')).toMatchObject({ severity: 'medium', evidence: { sharePercent: '49.99' } });
  });

  it.each([
    [499n, null],
    [500n, 'low'],
    [1999n, 'low'],
    [2000n, 'medium'],
    [5000n, 'high'],
    [10_000n, 'high'],
  ])('an owner holding %i bps of the supply is %s', (bps, severity) => {
    const supply = 1_000_000n * E18;
    const a = score(evidenceWith({ ownership: liveOwner, holders: { owner: (supply * bps) / 10_000n } }));
    const f = findingOf(a, 'owner_supply_share');
    if (severity === null) expect(f).toBeUndefined();
    else expect(f).toMatchObject({ severity, evidence: { owner: OWNER, sharePercent: percent(Number(bps)) } });
    expect(findingOf(a, 'supply_distribution')!.evidence).toMatchObject({ ownerSharePercent: percent(Number(bps)), poolSharePercent: '50.00', burnedSharePercent: '0.00' });
  });

  it('a balance larger than the supply is a high finding, and every share is printed as an exact decimal', () => {
    const supply = 1n;
    const a = score(evidenceWith({ ownership: liveOwner, holders: { totalSupply: supply, owner: 2n ** 255n, pool: 5n * 10n ** 23n, burned: 1n } }));
    expect(findingOf(a, 'owner_supply_share')).toMatchObject({ severity: 'high', evidence: { sharePercent: `${2n ** 255n * 100n}.00` } });
    expect(findingOf(a, 'balance_exceeds_supply')).toMatchObject({ severity: 'high', evidence: { holders: ['owner', 'pool'], totalSupply: '1' } });
    expect(findingOf(a, 'supply_distribution')!.evidence).toMatchObject({ poolSharePercent: '50000000000000000000000000.00', burnedSharePercent: '100.00' });
    for (const value of Object.values(findingOf(a, 'supply_distribution')!.evidence).slice(1)) expect(value).toMatch(/^\d+\.\d{2}$/);
    expect(a.verdict.decision).not.toBe('ALLOW');
  });

  it('no balance above the supply, no balance_exceeds_supply finding', () => {
    const supply = 1_000_000n * E18;
    const a = score(evidenceWith({ ownership: liveOwner, holders: { owner: supply, pool: supply / 2n } }));
    expect(findingOf(a, 'balance_exceeds_supply')).toBeUndefined();
  });
});

describe('scores', () => {
  const f = (severity: Severity): Finding => finding('owner_active', severity, 't');
  it.each([
    [[], 0],
    [['info', 'info'], 0],
    [['low'], 10],
    [['low', 'low', 'info'], 12],
    [['low', 'low', 'low', 'low', 'low', 'low', 'low', 'low', 'low'], 24],
    [['medium'], 25],
    [['medium', 'low'], 27],
    [['high', 'medium'], 54],
    [['high', 'high', 'high', 'high', 'high'], 79],
    [['critical'], 80],
    [['critical', 'critical'], 90],
    [['critical', 'high', 'high', 'high'], 100],
  ] as Array<[Severity[], number]>)('%o scores %i', (severities, expected) => {
    expect(scoreFindings(severities.map(f))).toBe(expected);
  });

  it('adding a finding never lowers the score, and the score stays within the band of the highest severity', () => {
    const all: Severity[] = ['info', 'low', 'medium', 'high', 'critical'];
    const bands: Record<Severity, [number, number]> = { info: [0, 0], low: [10, 24], medium: [25, 49], high: [50, 79], critical: [80, 100] };
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % all.length;
    for (let run = 0; run < 300; run++) {
      const list: Finding[] = [];
      let last = 0;
      for (let i = 0; i < 12; i++) {
        list.push(f(all[next()]!));
        const s = scoreFindings(list);
        expect(s).toBeGreaterThanOrEqual(last);
        const max = all[Math.max(...list.map((x) => all.indexOf(x.severity)))]!;
        expect(s).toBeGreaterThanOrEqual(bands[max][0]);
        expect(s).toBeLessThanOrEqual(bands[max][1]);
        last = s;
      }
    }
  });

  it('the level always names the band of the score, except INCOMPLETE (unknown, null)', () => {
    const samples = [cleanEvidence(), evidenceWith({ ownership: liveOwner, privileges: { scanned: true, selectors: selectorsOf('mint', 'fee') } }), evidenceWith({ contract: { paused: true } }), evidenceWith({ simulation: { status: 'no_pool', checkedQuotes: ['WETH'] } })];
    for (const e of samples) {
      const { verdict } = score(e);
      if (verdict.decision === 'INCOMPLETE') {
        expect(verdict).toMatchObject({ score: null, level: 'unknown' });
        continue;
      }
      const s = verdict.score!;
      expect(verdict.level).toBe(s >= 80 ? 'critical' : s >= 50 ? 'high' : s >= 25 ? 'medium' : 'low');
    }
  });

  it('per-category scores use the same bands; unavailable categories have a null score', () => {
    const a = score(evidenceWith({ ownership: liveOwner, privileges: { scanned: true, selectors: selectorsOf('mint', 'fee') } }));
    expect(a.risk.breakdown.privileges.score).toBe(54);
    expect(a.risk.breakdown.ownership.score).toBe(10);
    expect(a.risk.breakdown.contract.score).toBe(0);
    expect(a.risk.breakdown.liquidity.score).toBeNull();
    // Partial coverage still scores what was found (holders are always partial).
    expect(a.risk.coverage.holders.status).toBe('partial');
    expect(a.risk.breakdown.holders.score).toBe(0);
    const share = score(evidenceWith({ ownership: liveOwner, holders: { owner: 600_000n * 10n ** 18n } }));
    expect(share.risk.breakdown.holders.score).toBe(50);
    expect(Object.keys(a.risk.coverage)).toEqual([...CATEGORIES]);
    expect(Object.keys(a.risk.breakdown)).toEqual([...CATEGORIES]);
  });

  it('is pure: the same evidence gives the same assessment and is not modified', () => {
    const e = evidenceWith({ ownership: liveOwner, privileges: { scanned: true, selectors: selectorsOf('blacklist') } });
    const copy = structuredClone(e);
    expect(scoreTokenRisk(e)).toEqual(scoreTokenRisk(e));
    expect(e).toEqual(copy);
  });
});

describe('vocabulary', () => {
  it('the published schema lists exactly the categories, severities and finding codes the scorer uses', () => {
    const risk = TokenRiskReport.properties.risk.properties;
    expect(Object.keys(risk.coverage.properties)).toEqual([...CATEGORIES]);
    expect(Object.keys(risk.breakdown.properties)).toEqual([...CATEGORIES]);
    const finding = risk.breakdown.properties.contract.properties.findings.items.properties;
    expect((finding.code as unknown as { enum: string[] }).enum).toEqual([...FINDING_CODES]);
  });

  it('every finding code is produced by at least one test above, and none outside the list', () => {
    expect([...produced].filter((c) => !(FINDING_CODES as readonly string[]).includes(c))).toEqual([]);
    expect(FINDING_CODES.filter((c) => !produced.has(c))).toEqual([]);
  });
});

describe('the owner from owner() and getOwner()', () => {
  const LIVE = '0x1234567890123456789012345678901234567890' as Address;
  it('a live address from either wins over a burn address from the other (owner() renounced, getOwner() still an admin)', () => {
    expect(ownerOf(ZERO, LIVE)).toEqual({ owner: LIVE, ownerFunction: 'getOwner()' });
    expect(ownerOf(DEAD, LIVE)).toEqual({ owner: LIVE, ownerFunction: 'getOwner()' });
    expect(ownerOf(LIVE, ZERO)).toEqual({ owner: LIVE, ownerFunction: 'owner()' });
    expect(ownerOf(LIVE, OWNER)).toEqual({ owner: LIVE, ownerFunction: 'owner()' });
  });
  it('renounced only when every answer is a burn address; null when neither answers', () => {
    expect(ownerOf(ZERO, DEAD)).toEqual({ owner: ZERO, ownerFunction: 'owner()' });
    expect(ownerOf(null, DEAD)).toEqual({ owner: DEAD, ownerFunction: 'getOwner()' });
    expect(ownerOf(null, null)).toEqual({ owner: null, ownerFunction: null });
  });
});
