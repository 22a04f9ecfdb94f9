import { Type, type Static } from 'typebox';
import { Address, Amount, Asset, Chain, DateTime, StringEnum, Text } from '../../platform/schemas.js';
import { DECISIONS, PROOF_DECISIONS, REASONS } from './rules.js';

export const AgentId = Text({ minLength: 1, maxLength: 80, description: 'The agent the spend is for (1 to 80 characters)' });
export const RequestId = Text({ minLength: 1, maxLength: 120, description: "The caller's idempotency key for this spend (1 to 120 characters)" });
export const MaxRepeats = Type.Integer({ minimum: 1, maximum: 1_000_000, description: 'Decisions allowed to the same recipient for the same amount per UTC day' });
export const AllowedRecipients = Type.Array(Address(), { maxItems: 1000, description: 'Known recipients (compared case-insensitively)' });
export const DecisionValue = StringEnum(DECISIONS);
export const Reasons = Type.Array(StringEnum(REASONS), {
  description: 'Every rule that applied, as stable snake_case codes; empty for APPROVE',
});

export const EvaluatePolicy = Type.Object(
  {
    maxPerTransaction: Amount('Largest single payment'),
    remainingDailyBudget: Amount('What is left of the daily budget, as the caller knows it'),
    requireHumanAbove: Amount('Payments above this need a human'),
    maxRepeats: MaxRepeats,
    allowedRecipients: AllowedRecipients,
    blockUnknownRecipients: Type.Boolean({ description: 'true: recipients outside the list are blocked; false: they need a human' }),
  },
  { additionalProperties: false },
);

export const EvaluateRequest = Type.Object(
  {
    agentId: AgentId,
    requestId: RequestId,
    chain: Chain,
    asset: Asset,
    recipient: Address('Who would be paid'),
    amount: Amount('Proposed payment in USDC'),
    policy: EvaluatePolicy,
    context: Type.Optional(
      Type.Object(
        {
          repeatCount: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000, description: 'Earlier payments of this amount to this recipient today' })),
          proofDecision: Type.Optional(StringEnum(PROOF_DECISIONS, { description: 'Decision of a payment proof or preflight the caller holds' })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);
export type EvaluateRequest = Static<typeof EvaluateRequest>;

export const OptionalCheck = Type.Object({
  check: Type.String(),
  method: Type.String(),
  endpoint: Type.String(),
  price: Type.String({ description: 'USDC' }),
  asset: Type.Literal('USDC'),
  network: Type.String(),
  invoked: Type.Literal(false),
  charged: Type.Literal(false),
});

export const EvaluateResponse = Type.Object({
  decision: DecisionValue,
  reasons: Reasons,
  advisory: Type.Literal(true),
  enforced: Type.Literal(false),
  executionAuthorized: Type.Literal(false),
  automaticPayment: Type.Literal(false),
  agentId: Type.String(),
  requestId: Type.String(),
  evaluatedAt: DateTime(),
  optionalChecks: Type.Array(OptionalCheck, {
    description: 'Paid evidence checks the caller may buy; none is invoked or charged',
  }),
});
