import { Type, type Static, type TSchema } from 'typebox';
import { NETWORK } from '../../platform/prices.js';
import { Address, DateTime, StringEnum } from '../../platform/schemas.js';
import { COVERAGE_STATUSES, FINDING_CODES, SEVERITIES } from './findings.js';

const Decimal = (description: string) => Type.String({ pattern: '^[0-9]+$', description });
const NullableString = (description: string) => Type.Union([Type.String(), Type.Null()], { description });

/** One entry per category, spelled out so the static type stays precise (a test checks it matches CATEGORIES). */
const perCategory = <T extends TSchema>(schema: T, description: string) =>
  Type.Object(
    { contract: schema, upgradeability: schema, ownership: schema, privileges: schema, transferSimulation: schema, liquidity: schema, holders: schema },
    { description },
  );

export const Finding = Type.Object({
  code: StringEnum(FINDING_CODES, { description: 'Stable machine-readable finding code' }),
  severity: StringEnum(SEVERITIES),
  title: Type.String(),
  evidence: Type.Record(Type.String(), Type.Unknown(), { description: 'Addresses, selectors, measured taxes and amounts (raw units as decimal strings)' }),
});

const CoverageEntry = Type.Object({ status: StringEnum(COVERAGE_STATUSES), reason: Type.String() });
const BreakdownEntry = Type.Object({
  score: Type.Union([Type.Integer({ minimum: 0, maximum: 100 }), Type.Null()], { description: 'Category risk score; null when the category is unavailable' }),
  findings: Type.Array(Finding),
});

const SimStepOut = Type.Object({
  status: StringEnum(['ok', 'reverted', 'skipped'] as const),
  reason: NullableString('Revert reason when it reverted'),
  amountIn: Decimal('Amount sent (raw units of what was spent: quote token for a buy, the token for a sell or transfer)'),
  expectedOut: Decimal("What should arrive without a token tax (the pool's constant-product quote; the amount itself for a transfer)"),
  received: Decimal('What the fresh account really received'),
  taxPercent: NullableString('Measured tax in percent with two decimals; null when the step did not complete'),
});

export const TokenRiskReport = Type.Object(
  {
    token: Type.Object({
      chain: Type.Literal('base'),
      address: Address('The token, EIP-55 checksummed'),
      name: NullableString('name() as read on chain'),
      symbol: NullableString('symbol() as read on chain'),
      decimals: Type.Union([Type.Integer(), Type.Null()]),
      totalSupply: Type.Union([Decimal('totalSupply() in raw units'), Type.Null()]),
      codePresent: Type.Boolean(),
    }),
    verdict: Type.Object({
      decision: StringEnum(['ALLOW', 'WARN', 'BLOCK', 'INCOMPLETE'] as const),
      level: StringEnum(['low', 'medium', 'high', 'critical', 'unknown'] as const),
      score: Type.Union([Type.Integer({ minimum: 0, maximum: 100 }), Type.Null()], { description: '0 (no risk found) to 100; null with INCOMPLETE: missing evidence' }),
      confidence: StringEnum(['high', 'medium', 'low'] as const),
      reasons: Type.Array(Type.String(), { description: 'Finding codes behind BLOCK or WARN; <category>_unavailable or _partial behind INCOMPLETE' }),
    }),
    summary: Type.String(),
    risk: Type.Object({
      coverage: perCategory(CoverageEntry, 'What could be checked, per category'),
      breakdown: perCategory(BreakdownEntry, 'Score and findings per category'),
    }),
    simulation: Type.Union(
      [
        Type.Object({
          dex: Type.Literal('uniswap-v2'),
          pair: Address(),
          quote: Type.Object({ symbol: StringEnum(['WETH', 'USDC'] as const), address: Address(), decimals: Type.Integer() }),
          reserves: Type.Object({ token: Decimal('Token reserve'), quote: Decimal('Quote reserve') }),
          buyer: Address('Fresh simulated buyer (funded by a state override)'),
          recipient: Address('Fresh simulated transfer recipient'),
          buy: SimStepOut,
          transfer: SimStepOut,
          sell: SimStepOut,
        }),
        Type.Null(),
      ],
      { description: 'The measured buy, transfer and sell; null when no pool could be used' },
    ),
    blockNumber: Type.Union([Type.Integer(), Type.Null()], { description: 'Block the evidence was read at' }),
    network: Type.Literal(NETWORK),
    rulesVersion: Type.String({ description: 'Version of the scoring rules' }),
    checkedAt: DateTime(),
  },
  { description: 'Token risk report from onchain evidence' },
);
export type TokenRiskReport = Static<typeof TokenRiskReport>;
