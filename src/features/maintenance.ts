import type { Database } from '../platform/db/database.js';
import { EvidenceStore } from './evidence/store.js';
import { LeadStore } from './leads/store.js';
import { OrderStore } from './orders/store.js';
import { PolicyStore } from './spend-policy/policies.js';

export interface PurgeResult {
  leads: number;
  policies: number;
  orders: number;
  /** Evidence chains deleted with their policies; present only when there were some. */
  evidenceChains?: number;
}

/**
 * Deletes everything past its retention period; policies and orders keep a tombstone that answers
 * 410. Run periodically by the service and by `paywarden purge`.
 */
export async function purgeExpired(database: Database, now: Date): Promise<PurgeResult> {
  const leads = await new LeadStore(database).purgeExpired(now);
  const policies = new PolicyStore(database);
  const evidence = new EvidenceStore(database);
  const expired = await policies.expiredIds(now);
  let evidenceChains = 0;
  for (const id of expired) {
    // Its evidence chains first: they belong to the policy.
    evidenceChains += await evidence.purgePolicy(id);
    // And, under the policy's lock with its tombstone, a chain committed meanwhile: once the
    // policy is purged no later purge looks at it again.
    await policies.purge(id, now, async (tx) => void (evidenceChains += await evidence.deleteChains(tx, id)));
  }
  return {
    leads,
    policies: expired.length,
    ...(evidenceChains ? { evidenceChains } : {}),
    // The TTL only matters when creating orders; purging compares stored expiry times.
    orders: await new OrderStore(database, 0).purgeExpired(now),
  };
}
