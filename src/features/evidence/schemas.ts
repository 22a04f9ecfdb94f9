import { Type, type Static } from 'typebox';
import { CANONICAL_AMOUNT_PATTERN } from '../../platform/money.js';
import { idPattern } from '../../platform/ids.js';
import { Address, Asset, Chain, DateTime, StringEnum } from '../../platform/schemas.js';
import { TX_HASH_PATTERN } from '../reports/schemas.js';
import { PolicyId, Receipt } from '../spend-policy/protected-schemas.js';
import { AgentId, DecisionValue, Reasons, RequestId } from '../spend-policy/schemas.js';
import { EVENT_TYPES } from './hashing.js';
import { SETTLEMENT_RESULTS } from './settlement.js';

export const EvidenceChainId = Type.String({ pattern: idPattern('ec'), description: 'ec_ followed by 32 lowercase hex characters' });
export const ChainParams = Type.Object({ evidenceChainId: EvidenceChainId });

export const Intent = Type.Object(
  {
    policyId: PolicyId,
    agentId: AgentId,
    requestId: RequestId,
    chain: Chain,
    asset: Asset,
    recipient: Address('Who would be paid'),
    amount: Type.String({
      pattern: CANONICAL_AMOUNT_PATTERN,
      description: 'USDC amount: 0 or an integer part without leading zeros, optional fraction of 1 to 6 digits',
      examples: ['12.5'],
    }),
    expectedFrom: Type.Optional(Address('The payer settlement reconciliation expects')),
  },
  {
    additionalProperties: false,
    description: 'An immutable payment intent. The requestId shares one namespace (and one budget) with protected decisions of the same policy',
  },
);
export type IntentBody = Static<typeof Intent>;

export const CreatedChain = Type.Object({
  evidenceChainId: Type.String(),
  intentDigest: Type.String({ description: 'sha256:<hex> over the RFC 8785 canonical JSON of the normalised intent' }),
  decision: DecisionValue,
  reasons: Reasons,
  policyRevision: Type.Integer(),
  decisionId: Type.String({ description: 'The stored protected decision (a HUMAN_APPROVAL is approved through /api/spendpolicy/decisions/{decisionId}/approve)' }),
  executionAuthorized: Type.Literal(false),
  replayed: Type.Boolean({ description: 'true when an identical earlier intent was answered from storage and nothing was spent' }),
});

const Body = Type.Object({}, { additionalProperties: true, description: 'Event contents; see the event types' });

export const ChainEventSchema = Type.Object({
  evidenceId: Type.String(),
  sequence: Type.Integer({ minimum: 1 }),
  eventType: StringEnum(EVENT_TYPES, {
    description: 'PRECHECK_COMPLETED on creation (body: the decision and its signed receipt), TRANSACTION_PREFLIGHT_COMPLETED on preflight, SETTLEMENT_RECONCILED on settlement',
  }),
  body: Body,
  createdAt: DateTime(),
  prevHash: Type.String({ description: 'intentDigest for sequence 1, else the previous event hash' }),
  hash: Type.String({
    description: 'sha256:<hex> over the RFC 8785 canonical JSON of { evidenceChainId, evidenceId, sequence, eventType, body, createdAt, prevHash }',
  }),
  linkReceipt: Type.Optional(
    Type.Object(Receipt.properties, {
      description:
        'Signed when the event was appended (kind evidence-event, subjectId the evidenceId) over { evidenceChainId, evidenceId, sequence, hash }. As hash covers prevHash, a signed link also covers every event before it and the intent. Absent on events stored before links were signed.',
    }),
  ),
});

export const ChainHead = Type.Object(
  {
    evidenceChainId: Type.String(),
    length: Type.Integer({ minimum: 0, description: 'How many events the chain had when it was read' }),
    headHash: Type.String({ description: 'The hash of the last event' }),
    issuedAt: DateTime('When the chain was read'),
    receipt: Type.Object(Receipt.properties, { description: 'Signed at read time (kind evidence-head, subjectId the chain) over { evidenceChainId, length, headHash, issuedAt }' }),
  },
  { description: 'The signed end of the chain as read: a copy missing its last events no longer matches it' },
);

const StoredIntent = Type.Object({
  policyId: Type.String(),
  agentId: Type.String(),
  requestId: Type.String(),
  chain: Type.Literal('base'),
  asset: Type.Literal('USDC'),
  recipient: Type.String(),
  amount: Type.String(),
  expectedFrom: Type.Optional(Type.String()),
});

export const EvidenceChain = Type.Object({
  evidenceChainId: Type.String(),
  policyId: Type.String(),
  requestId: Type.String(),
  intent: StoredIntent,
  intentDigest: Type.String(),
  createdAt: DateTime(),
  events: Type.Array(ChainEventSchema, { description: 'In sequence order' }),
  head: ChainHead,
});

export const Reconciliation = StringEnum(['NOT_SUBMITTED', ...SETTLEMENT_RESULTS] as const);
const Open = (description: string) => Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()], { description });

export const Summary = Type.Object({
  evidenceChainId: Type.String(),
  intentDigest: Type.String(),
  preAuthorization: Open('The protected decision: decisionId, decision, reasons, policyRevision, approval (current state), receiptId'),
  transactionPreflight: Open('The attached preflight: evidenceId, inputDigest, verdict, intentCheck; null when none'),
  settlement: Open('The latest settlement evidence; null when none was submitted'),
  reconciliation: Reconciliation,
  limitations: Type.Array(Type.String()),
  executionAuthorized: Type.Literal(false),
});

export const SettlementRequest = Type.Object(
  { txHash: Type.String({ pattern: TX_HASH_PATTERN, description: 'Transaction hash: 0x and 64 hex characters' }) },
  { additionalProperties: false },
);

export const Mismatch = Type.Object({
  field: StringEnum(['recipient', 'amount', 'expectedFrom', 'minedAt'] as const, {
    description: 'The intent field that differs; minedAt: the transaction was mined before the chain was created (expected names the earliest time accepted)',
  }),
  expected: Type.String(),
  observed: Type.String(),
});

export const SettlementResponse = Type.Object({
  evidenceChainId: Type.String(),
  settlementEvidenceId: Type.String(),
  txHash: Type.String({ description: 'Lower case' }),
  result: StringEnum(SETTLEMENT_RESULTS),
  reason: Type.String(),
  mismatches: Type.Array(Mismatch, { description: 'Differing fields of the closest USDC transfer; empty unless MISMATCH' }),
  replayed: Type.Boolean({ description: 'true when nothing new was recorded: the answer is the stored settlement evidence' }),
  confirmations: Type.Integer({ minimum: 0 }),
  requiredConfirmations: Type.Integer({ minimum: 0, description: 'MIN_CONFIRMATIONS: the depth MATCH, MISMATCH and FAILED need' }),
  checkedAt: DateTime('When the chain was read for the recorded evidence'),
});

export const PreflightResponse = Type.Object({
  evidenceChainId: Type.String(),
  preflightEvidenceId: Type.String(),
  inputDigest: Type.String({ description: 'Digest of the unsigned input; check that it represents the intended transaction' }),
  verdict: Type.Object({}, { additionalProperties: true }),
  intentCheck: Type.Object({}, { additionalProperties: true, description: 'Whether the input is a plain USDC transfer of the intent' }),
  preflight: Type.Object({}, { additionalProperties: true, description: 'The full transaction-preflight report' }),
  replayed: Type.Boolean({ description: 'true when the same preflight was already attached; the recorded one is answered' }),
  executionAuthorized: Type.Literal(false),
});
