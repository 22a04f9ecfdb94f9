import type { Generated } from 'kysely';

/**
 * Row types of every table. Timestamps are ISO-8601 UTC strings (they sort as text on both
 * databases); money is integer micro-USDC, read back as bigint (SQLite) or string (PostgreSQL)
 * and converted in each store.
 */
export interface DB {
  kv: KvTable;
  pilot_leads: PilotLeadsTable;
}

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
