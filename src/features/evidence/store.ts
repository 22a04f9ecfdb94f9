import { sql, type Selectable } from 'kysely';
import type { Database } from '../../platform/db/database.js';
import type { EvidenceChainsTable } from '../../platform/db/schema.js';
import { purgeInChunks, writeTransaction, type Tx } from '../../platform/db/tx.js';
import { AppError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import type { Receipt, ReceiptSigner } from '../../platform/receipts.js';
import { loadPolicy } from '../spend-policy/policies.js';
import { LINK_RECEIPT_KIND, linkEvent, linkSubject, type ChainEvent, type EventType, type Intent } from './hashing.js';

export type ChainRow = Selectable<EvidenceChainsTable>;

export interface StoredChain {
  evidenceChainId: string;
  policyId: string;
  requestId: string;
  intent: Intent;
  intentDigest: string;
  createdAt: string;
  events: ChainEvent[];
}

/**
 * Storage of evidence chains. Events are only ever inserted: the next one links to the last
 * under the chain's lock (BEGIN IMMEDIATE on SQLite, a row lock on PostgreSQL), and a unique
 * (chain, sequence) index refuses a second event at the same place should that ever fail.
 */
export class EvidenceStore {
  /** `signer` signs each appended event's link; a store that only reads or purges needs none. */
  constructor(
    private readonly database: Database,
    private readonly signer?: ReceiptSigner,
  ) {}

  get db() {
    return this.database.db;
  }

  async chainById(tx: Tx, id: string): Promise<ChainRow | undefined> {
    return tx.selectFrom('evidence_chains').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** The chain row, locked until commit on PostgreSQL (SQLite's write transaction already is). */
  async lockChain(tx: Tx, id: string): Promise<ChainRow> {
    let q = tx.selectFrom('evidence_chains').selectAll().where('id', '=', id);
    if (this.database.dialect === 'postgres') q = q.forUpdate();
    return q.executeTakeFirstOrThrow();
  }

  async chainByRequest(tx: Tx, policyId: string, requestId: string): Promise<ChainRow | undefined> {
    return tx.selectFrom('evidence_chains').selectAll().where('policy_id', '=', policyId).where('request_id', '=', requestId).executeTakeFirst();
  }

  async events(tx: Tx, chainId: string, type?: EventType): Promise<ChainEvent[]> {
    let q = tx.selectFrom('evidence_events').selectAll().where('chain_id', '=', chainId);
    if (type) q = q.where('event_type', '=', type);
    const rows = await q.orderBy('sequence', 'asc').execute();
    return rows.map((r) => ({
      evidenceId: r.id,
      sequence: Number(r.sequence),
      eventType: r.event_type as EventType,
      body: JSON.parse(r.body) as Record<string, unknown>,
      createdAt: r.created_at,
      prevHash: r.prev_hash,
      hash: r.hash,
      ...(r.link_receipt ? { linkReceipt: JSON.parse(r.link_receipt) as Receipt } : {}),
    }));
  }

  async latest(tx: Tx, chainId: string, type: EventType): Promise<ChainEvent | undefined> {
    return (await this.events(tx, chainId, type)).at(-1);
  }

  async insertChain(tx: Tx, row: ChainRow): Promise<void> {
    await tx.insertInto('evidence_chains').values(row).execute();
  }

  /**
   * Appends an event after the chain's last one and signs its link; call under the chain's lock.
   * createdAt never goes back: a request that read the clock before another one appended takes
   * the last event's time instead, so createdAt is non-decreasing along every chain.
   */
  async append(tx: Tx, chain: ChainRow, eventType: EventType, body: Record<string, unknown>, now: Date): Promise<ChainEvent> {
    if (!this.signer) throw new Error('EvidenceStore.append needs a receipt signer');
    const last = await tx
      .selectFrom('evidence_events')
      .select(['sequence', 'hash', 'created_at'])
      .where('chain_id', '=', chain.id)
      .orderBy('sequence', 'desc')
      .limit(1)
      .executeTakeFirst();
    const at = now.toISOString();
    const linked = linkEvent(chain.id, chain.intent_digest, last && { sequence: Number(last.sequence), hash: last.hash }, {
      evidenceId: newId('ev'),
      eventType,
      body,
      createdAt: last && last.created_at > at ? last.created_at : at,
    });
    const linkReceipt = this.signer.sign(LINK_RECEIPT_KIND, linked.evidenceId, linkSubject(chain.id, linked), now);
    const event: ChainEvent = { ...linked, linkReceipt };
    await tx
      .insertInto('evidence_events')
      .values({
        id: event.evidenceId,
        chain_id: chain.id,
        sequence: event.sequence,
        event_type: event.eventType,
        body: JSON.stringify(event.body),
        created_at: event.createdAt,
        prev_hash: event.prevHash,
        hash: event.hash,
        link_receipt: JSON.stringify(linkReceipt),
      })
      .execute();
    return event;
  }

  async read(tx: Tx, chain: ChainRow): Promise<StoredChain> {
    return {
      evidenceChainId: chain.id,
      policyId: chain.policy_id,
      requestId: chain.request_id,
      intent: JSON.parse(chain.intent) as Intent,
      intentDigest: chain.intent_digest,
      createdAt: chain.created_at,
      events: await this.events(tx, chain.id),
    };
  }

  /** Whether `keyHash` is the agent key of a policy whose access has ended (410 rather than 404). */
  async isExpiredAgentKey(keyHash: string, now: Date): Promise<boolean> {
    const row = await this.db
      .selectFrom('policies')
      .select('id')
      .where('agent_key_hash', '=', keyHash)
      .where((eb) => eb.or([eb('access_expires_at', '<=', now.toISOString()), eb('purged_at', 'is not', null)]))
      .executeTakeFirst();
    return row !== undefined;
  }

  /**
   * Serialises, until the transaction ends, every claim on the Transfers of one transaction
   * within one policy. Settling a chain may move another chain's claim to another Transfer of the
   * same transaction (see claimOrMismatch); two such moves running at once on PostgreSQL could
   * each read the other's uncommitted step, and one released a claim the other had just handed
   * over: a chain kept its MATCH without a Transfer, and one payment settled three intents.
   * SQLite has one writer at a time already. It cannot deadlock: it is taken after the chain's
   * own row lock, and its holder then touches only claim rows of this policy and transaction,
   * which every settlement changes under this same lock (the purge deletes only claims of
   * policies whose access ended, which no settlement reaches).
   */
  async lockClaims(tx: Tx, policyId: string, txHash: string): Promise<void> {
    if (this.database.dialect !== 'postgres') return;
    await sql`select pg_advisory_xact_lock(hashtextextended(${`evidence-claims:${policyId}:${txHash}`}, 0))`.execute(tx);
  }

  /**
   * Claims a USDC Transfer as the settlement of `chain` within its policy and answers which chain
   * of that policy holds it now: this one (claimed now, or already was) or the one that claimed
   * it first. Claims are per policy: a transfer is public, so another tenant's chain naming it
   * is that tenant's own record and must not lock this one out. A concurrent claim of the same
   * transfer in the same policy waits for the first to commit, then sees it.
   */
  async claimTransfer(tx: Tx, chain: Pick<ChainRow, 'id' | 'policy_id'>, txHash: string, logIndex: number, now: Date): Promise<string> {
    await tx
      .insertInto('evidence_settlement_claims')
      .values({ policy_id: chain.policy_id, tx_hash: txHash, log_index: logIndex, chain_id: chain.id, created_at: now.toISOString() })
      .onConflict((oc) => oc.columns(['policy_id', 'tx_hash', 'log_index']).doNothing())
      .execute();
    const holder = await tx
      .selectFrom('evidence_settlement_claims')
      .select('chain_id')
      .where('policy_id', '=', chain.policy_id)
      .where('tx_hash', '=', txHash)
      .where('log_index', '=', logIndex)
      .executeTakeFirstOrThrow();
    return holder.chain_id;
  }

  /**
   * Hands the claim of a Transfer from one chain of its policy to another; false (and nothing
   * changed) when `from` no longer holds it.
   */
  async passClaim(tx: Tx, policyId: string, txHash: string, logIndex: number, from: string, to: string): Promise<boolean> {
    const res = await tx
      .updateTable('evidence_settlement_claims')
      .set({ chain_id: to })
      .where('policy_id', '=', policyId)
      .where('tx_hash', '=', txHash)
      .where('log_index', '=', logIndex)
      .where('chain_id', '=', from)
      .executeTakeFirst();
    return Number(res.numUpdatedRows) === 1;
  }

  /** Gives up the claim `chainId` holds on a Transfer (one it took for nothing). */
  async releaseClaim(tx: Tx, policyId: string, txHash: string, logIndex: number, chainId: string): Promise<void> {
    await tx
      .deleteFrom('evidence_settlement_claims')
      .where('policy_id', '=', policyId)
      .where('tx_hash', '=', txHash)
      .where('log_index', '=', logIndex)
      .where('chain_id', '=', chainId)
      .execute();
  }

  /**
   * Deletes the chains of a policy whose access ended, with their events and settlement claims,
   * a chunk of chains per write transaction (purgeInChunks), each under the policy's lock as
   * every writer of its chains takes it; returns how many chains.
   */
  async purgePolicy(policyId: string): Promise<number> {
    return purgeInChunks(this.database, async (tx, limit) => {
      await loadPolicy(this.database, tx, policyId, true);
      return this.deleteChains(tx, policyId, limit);
    });
  }

  /** Deletes up to `limit` chains of the policy (all of them without a limit), with their events and claims. */
  async deleteChains(tx: Tx, policyId: string, limit?: number): Promise<number> {
    let q = tx.selectFrom('evidence_chains').select('id').where('policy_id', '=', policyId);
    if (limit !== undefined) q = q.limit(limit);
    const ids = (await q.execute()).map((r) => r.id);
    if (!ids.length) return 0;
    await tx.deleteFrom('evidence_settlement_claims').where('chain_id', 'in', ids).execute();
    await tx.deleteFrom('evidence_events').where('chain_id', 'in', ids).execute();
    await tx.deleteFrom('evidence_chains').where('id', 'in', ids).execute();
    return ids.length;
  }
}

/**
 * Runs storage work; anything but one of our own answers means the database failed, which the
 * evidence endpoints report as 503. It does not say that nothing was recorded: a commit whose
 * acknowledgement failed (a connection lost at COMMIT, a WAL sync that could not start) may have
 * stored the chain and spent its budget, so the caller is told to retry unchanged, which an
 * exact retry makes safe. The cause goes to the log only.
 */
export async function storage<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof AppError) throw err;
    const e = new AppError('storage_unavailable', 'evidence storage is unavailable; retry the request unchanged (a chain retried with the same requestId is never created twice)');
    e.cause = err;
    throw e;
  }
}
