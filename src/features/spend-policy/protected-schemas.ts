import { Type, type Static } from 'typebox';
import { Address, Amount, Asset, Chain, DateTime, StringEnum, Text } from '../../platform/schemas.js';
import { idPattern } from '../../platform/ids.js';
import { AgentId, AllowedRecipients, DecisionValue, MaxRepeats, Reasons, RequestId } from './schemas.js';

export const PolicyId = Type.String({ pattern: idPattern('sgp'), description: 'sgp_ followed by 32 lowercase hex characters' });
export const DecisionId = Type.String({ pattern: idPattern('dec'), description: 'dec_ followed by 32 lowercase hex characters' });
export const ActiveStatus = StringEnum(['active', 'inactive'] as const);

export const PolicyRules = Type.Object(
  {
    maxPerTransaction: Amount('Largest single payment'),
    dailyBudget: Amount('Total APPROVE plus approved spend per UTC day'),
    requireHumanAbove: Amount('Payments above this need an administrator'),
    maxRepeats: MaxRepeats,
    allowedRecipients: AllowedRecipients,
    blockUnknownRecipients: Type.Boolean({ description: 'true: recipients outside the list are blocked; false: they need an administrator' }),
  },
  { additionalProperties: false },
);
export type PolicyRules = Static<typeof PolicyRules>;

export const CreatePolicyRequest = Type.Object(
  {
    name: Text({ minLength: 1, maxLength: 120 }),
    agentId: AgentId,
    policy: PolicyRules,
  },
  { additionalProperties: false },
);

export const ReplacePolicyRequest = Type.Object(
  {
    policy: PolicyRules,
    name: Type.Optional(Text({ minLength: 1, maxLength: 120 })),
    status: Type.Optional(ActiveStatus),
    agentStatus: Type.Optional(ActiveStatus),
  },
  { additionalProperties: false, description: 'Replaces the rules (all six), and optionally the name and statuses; revision + 1' },
);

export const Policy = Type.Object({
  policyId: Type.String(),
  name: Type.String(),
  agentId: Type.String(),
  policy: PolicyRules,
  revision: Type.Integer({ minimum: 1 }),
  status: ActiveStatus,
  agentStatus: ActiveStatus,
  directChecks: Type.Boolean({ description: 'Direct evidence checks (preflight, settlement), turned on by the service operator' }),
  createdAt: DateTime(),
  accessExpiresAt: DateTime('Pilot access ends 30 days after creation; then every endpoint of the policy answers 410'),
});
export type Policy = Static<typeof Policy>;

export const CreatedPolicy = Type.Object({
  ...Policy.properties,
  adminKey: Type.String({ description: 'Shown once; reads, replaces and approves. Store it now: it cannot be recovered' }),
  agentKey: Type.String({ description: 'Shown once; asks for decisions. Store it now: it cannot be recovered' }),
});

export const DecisionRequest = Type.Object(
  {
    policyId: PolicyId,
    requestId: RequestId,
    agentId: AgentId,
    chain: Chain,
    asset: Asset,
    recipient: Address('Who would be paid'),
    amount: Amount('Proposed payment in USDC'),
  },
  { additionalProperties: false },
);
export type DecisionRequest = Static<typeof DecisionRequest>;

export const ApprovalStatus = StringEnum(['PENDING', 'ADMIN_APPROVED', 'EXPIRED'] as const);

export const Decision = Type.Object({
  decisionId: Type.String(),
  policyId: Type.String(),
  policyRevision: Type.Integer(),
  requestId: Type.String(),
  agentId: Type.String(),
  chain: Type.Literal('base'),
  asset: Type.Literal('USDC'),
  recipient: Type.String(),
  amount: Type.String(),
  decision: DecisionValue,
  reasons: Reasons,
  approval: Type.Union([
    Type.Object({
      status: ApprovalStatus,
      expiresAt: DateTime(),
      approvedAt: Type.Union([DateTime(), Type.Null()]),
    }),
    Type.Null(),
  ], { description: 'null unless the decision is HUMAN_APPROVAL' }),
  executionAuthorized: Type.Literal(false),
  createdAt: DateTime(),
});
export type Decision = Static<typeof Decision>;

export const Receipt = Type.Object({
  receiptId: Type.String(),
  kind: Type.String(),
  subjectId: Type.String(),
  digest: Type.String({ description: 'sha256:<hex> over the RFC 8785 canonical JSON of the subject' }),
  issuedAt: DateTime(),
  keyId: Type.String({ description: 'kid of the signing key in /.well-known/jwks.json' }),
  alg: Type.Literal('EdDSA'),
  signature: Type.String({ description: 'base64url Ed25519 signature over the 32 raw bytes of the digest' }),
});

export const DecisionWithReceipt = Type.Object({ decision: Decision, receipt: Receipt });

/** The body of a request that takes none: optional, and when sent, an empty object. */
export const NoParameters = Type.Object({}, { additionalProperties: false, description: 'Optional: nothing to send (an empty object at most)' });

export const ApproveRequest = Type.Object(
  { note: Type.Optional(Text({ maxLength: 500 })) },
  { additionalProperties: false },
);

export const DecisionList = Type.Object({
  items: Type.Array(Decision),
  nextCursor: Type.Union([Type.String(), Type.Null()], { description: 'Pass as cursor for the next (older) page; null at the end' }),
});

export const DecisionListQuery = Type.Object(
  {
    status: Type.Optional(ApprovalStatus),
    decision: Type.Optional(DecisionValue),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
    cursor: Type.Optional(Type.String({ pattern: idPattern('dec'), description: "nextCursor of the previous page: the id of its last decision" })),
  },
  { additionalProperties: false },
);

export const AgentKeyResponse = Type.Object({
  policyId: Type.String(),
  agentKey: Type.String({ description: 'The new agent key, shown once; the previous one stopped working' }),
});

export const AdminKeyResponse = Type.Object({
  policyId: Type.String(),
  adminKey: Type.String({ description: 'The new admin key, shown once; the previous one stopped working' }),
});
