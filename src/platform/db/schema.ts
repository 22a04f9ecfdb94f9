import type { ColumnType, Generated } from 'kysely';

/**
 * Row types of every table. Timestamps are ISO-8601 UTC strings (they sort as text on both
 * databases); money is integer micro-USDC, read back as bigint (SQLite) or string (PostgreSQL)
 * and converted in each store.
 */
export interface DB {
  kv: KvTable;
  pilot_leads: PilotLeadsTable;
  policies: PoliciesTable;
  decisions: DecisionsTable;
  policy_day_spend: PolicyDaySpendTable;
  policy_day_repeats: PolicyDayRepeatsTable;
  paid_reports: PaidReportsTable;
  orders: OrdersTable;
  evidence_chains: EvidenceChainsTable;
  evidence_events: EvidenceEventsTable;
  evidence_settlement_claims: EvidenceSettlementClaimsTable;
}

/** A bigint column as the drivers return it. */
export type BigIntColumn = bigint | number | string;

export interface KvTable {
  key: string;
  value: string;
  created_at: string;
}

export interface PilotLeadsTable {
  id: string;
  email: string;
  company: string;
  monthly_decisions: string;
  needs: string;
  source: string;
  created_at: string;
  seq: Generated<number>;
}

export interface PoliciesTable {
  id: string;
  name: string;
  agent_id: string;
  /** JSON of the six rules with canonical decimal amounts */
  rules: string;
  revision: number;
  status: string;
  agent_status: string;
  direct_checks: number;
  admin_key_hash: string;
  agent_key_hash: string;
  created_at: string;
  updated_at: string;
  access_expires_at: string;
  /** set when purge removed the policy's data; the row stays so callers get 410, not 404 */
  purged_at: string | null;
}

export interface DecisionsTable {
  seq: Generated<number>;
  id: string;
  policy_id: string;
  request_id: string;
  agent_id: string;
  recipient: string;
  amount_micro: BigIntColumn;
  /** digest of the request content, to tell an exact retry from a conflicting reuse */
  request_digest: string;
  decision: string;
  reasons: string;
  policy_revision: number;
  /** UTC day (YYYY-MM-DD) whose budget the decision was made against */
  day: string;
  approval_status: string | null;
  approval_expires_at: string | null;
  approved_at: string | null;
  approval_note: string | null;
  created_at: string;
  /**
   * JSON of the receipt of the decision as last changed. A new decision's receipt is stored
   * without its signature, which follows from the other fields (Ed25519 is deterministic) and is
   * added when it is read (DecisionService.stored); an approval's receipt is stored signed.
   */
  receipt: string;
}

export interface PolicyDaySpendTable {
  policy_id: string;
  day: string;
  spent_micro: BigIntColumn;
}

export interface PolicyDayRepeatsTable {
  policy_id: string;
  day: string;
  recipient: string;
  amount_micro: BigIntColumn;
  count: number;
}

/** One row per payment authorization: the report it bought and how its settlement went. */
export interface PaidReportsTable {
  id: string;
  path: string;
  input_digest: string;
  input: string;
  report: string;
  /** JSON receipt, signed once the settlement is seen */
  receipt: string | null;
  price_micro: BigIntColumn;
  network: string;
  pay_to: string;
  payer: string;
  /** payer:nonce of the EIP-3009 authorization; unique, so one authorization buys one report */
  auth_id: string;
  /** digest of the whole payment payload, so a replay must be byte-for-byte the same authorization */
  payment_digest: string;
  /** JSON of the verified payment payload and requirements, to settle again after a crash; without its signature once settled or failed (see withoutSignature) */
  payment: string;
  /** stored | settled | pending | failed */
  status: string;
  settle_tx: string | null;
  failure: string | null;
  /** block height when the payment was verified: where a settlement search on chain starts */
  from_block: BigIntColumn;
  order_id: string | null;
  created_at: string;
  settled_at: string | null;
  /** when the last settle of this authorization was sent to the facilitator (a lease: see claimSettle) */
  settle_started_at: string | null;
  /**
   * when an answer carrying the report was first written out in full; PAID_REPLAY_WINDOW_SECONDS
   * later the payment signature alone (public on chain once settled) no longer brings it back
   */
  delivered_at: string | null;
}

export interface OrdersTable {
  id: string;
  key_hash: string;
  path: string;
  input_digest: string;
  input: string;
  report_id: string | null;
  created_at: string;
  expires_at: string;
}

/** An immutable payment intent and the protected decision made for it. */
export interface EvidenceChainsTable {
  id: string;
  policy_id: string;
  /** shares the decisions' (policy_id, request_id) namespace: one requestId, one spend */
  request_id: string;
  decision_id: string;
  /** JSON of the normalised intent (addresses lower case, canonical amount) */
  intent: string;
  intent_digest: string;
  created_at: string;
}

/** Append-only, hash-linked evidence of a chain; `hash` covers `prev_hash` and the event. */
export interface EvidenceEventsTable {
  id: string;
  chain_id: string;
  /** 1, 2, 3, … within the chain */
  sequence: number;
  event_type: string;
  /** JSON of the event body */
  body: string;
  created_at: string;
  prev_hash: string;
  hash: string;
  /** JSON of the event's link receipt (signed over its hash); null for events stored before 0009 */
  link_receipt: ColumnType<string | null, string | null | undefined, never>;
}

/**
 * Which evidence chain of a policy a USDC Transfer (transaction and log index) was reconciled as
 * the MATCH of: within a policy, one payment settles one intent, however many of its chains name
 * the transaction. Another policy's claim of the same public transfer is its own record (0010).
 */
export interface EvidenceSettlementClaimsTable {
  policy_id: string;
  tx_hash: string;
  log_index: number;
  chain_id: string;
  created_at: string;
}
