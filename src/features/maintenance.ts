import type { Database } from '../platform/db/database.js';
import { LeadStore } from './leads/store.js';
import { OrderStore } from './orders/store.js';
import { PolicyStore } from './spend-policy/policies.js';

export interface PurgeResult {
  leads: number;
  policies: number;
  orders: number;
}

/** Deletes everything past its retention period. Run periodically by the service and by `paywarden purge`. */
export async function purgeExpired(database: Database, now: Date): Promise<PurgeResult> {
  return {
    leads: await new LeadStore(database).purgeExpired(now),
    policies: await new PolicyStore(database).purgeExpired(now),
    // The TTL only matters when creating orders; purging compares stored expiry times.
    orders: await new OrderStore(database, 0).purgeExpired(now),
  };
}
