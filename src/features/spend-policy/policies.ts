import { sql, type UpdateQueryBuilder } from 'kysely';
import type { Database } from '../../platform/db/database.js';
import type { DB, PoliciesTable } from '../../platform/db/schema.js';
import { purgeInChunks, writeTransaction, type Tx } from '../../platform/db/tx.js';
import { AppError, type ErrorCode } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { generateKey, hashKey, presentedKey, sameHash, type KeyKind } from '../../platform/keys.js';
import { formatUsdc, parseUsdc } from '../../platform/money.js';
import type { Policy, PolicyRules } from './protected-schemas.js';
import type { PolicyRules as EvalRules } from './rules.js';

export const PILOT_RETENTION_DAYS = 30;
export type PolicyRow = PoliciesTable;

/** Amounts are kept in canonical form ("10.50" is stored and shown as "10.5"). */
export function canonicalRules(rules: PolicyRules): PolicyRules {
  return {
    maxPerTransaction: formatUsdc(parseUsdc(rules.maxPerTransaction)),
    dailyBudget: formatUsdc(parseUsdc(rules.dailyBudget)),
    requireHumanAbove: formatUsdc(parseUsdc(rules.requireHumanAbove)),
    maxRepeats: rules.maxRepeats,
    allowedRecipients: [...rules.allowedRecipients],
    blockUnknownRecipients: rules.blockUnknownRecipients,
  };
}

export function rulesOf(row: PolicyRow): PolicyRules {
  return JSON.parse(row.rules) as PolicyRules;
}

export function evalRulesOf(row: PolicyRow): EvalRules & { dailyBudget: bigint } {
  const r = rulesOf(row);
  return {
    maxPerTransaction: parseUsdc(r.maxPerTransaction),
    dailyBudget: parseUsdc(r.dailyBudget),
    requireHumanAbove: parseUsdc(r.requireHumanAbove),
    maxRepeats: r.maxRepeats,
    allowedRecipients: r.allowedRecipients,
    blockUnknownRecipients: r.blockUnknownRecipients,
  };
}

export function toPolicy(row: PolicyRow): Policy {
  return {
    policyId: row.id,
    name: row.name,
    agentId: row.agent_id,
    policy: rulesOf(row),
    revision: Number(row.revision),
    status: row.status as Policy['status'],
    agentStatus: row.agent_status as Policy['agentStatus'],
    directChecks: Number(row.direct_checks) === 1,
    createdAt: row.created_at,
    accessExpiresAt: row.access_expires_at,
  };
}

/** Reads the policy row; on PostgreSQL inside a transaction it also locks it until commit. */
export async function loadPolicy(database: Database, tx: Tx, policyId: string, forUpdate = false): Promise<PolicyRow | undefined> {
  let q = tx.selectFrom('policies').selectAll().where('id', '=', policyId);
  if (forUpdate && database.dialect === 'postgres') q = q.forUpdate();
  return q.executeTakeFirst();
}

export interface KeyCheck<K extends KeyKind> {
  /** Which key kinds the endpoint takes. */
  kinds: K[];
  /** The 401 code when no key of those kinds is presented. */
  missing: ErrorCode;
  /** What the 401 says beyond its title. */
  detail?: string;
}

/**
 * The authentication rules of the specification: a missing key, or one of the wrong kind, is
 * 401; an unknown policy or a key that does not belong to it is 404 (never telling which);
 * expired pilot access is 410.
 */
export function checkKey<K extends KeyKind>(authorization: string | undefined, check: KeyCheck<K>): { kind: K; hash: string } {
  const key = presentedKey(authorization);
  if (!key || !(check.kinds as KeyKind[]).includes(key.kind)) throw new AppError(check.missing, check.detail);
  return key as { kind: K; hash: string };
}

export function authorizePolicy(row: PolicyRow | undefined, key: { kind: KeyKind; hash: string }, now: Date): PolicyRow {
  const expected = row && (key.kind === 'admin' ? row.admin_key_hash : row.agent_key_hash);
  if (!row || !expected || !sameHash(expected, key.hash)) throw new AppError('not_found', 'policy or key not found');
  if (row.purged_at || now.toISOString() >= row.access_expires_at) {
    throw new AppError('expired', 'protected-policy access has expired');
  }
  return row;
}

/** An update of a policy row limited to a policy that is still accessible at `now` (not purged, access not ended). */
function live<O>(q: UpdateQueryBuilder<DB, 'policies', 'policies', O>, now: Date): UpdateQueryBuilder<DB, 'policies', 'policies', O> {
  return q.where('purged_at', 'is', null).where('access_expires_at', '>', now.toISOString());
}

export class PolicyStore {
  constructor(private readonly database: Database) {}

  async create(input: { name: string; agentId: string; policy: PolicyRules }, now: Date): Promise<{ row: PolicyRow; adminKey: string; agentKey: string }> {
    const adminKey = generateKey('admin');
    const agentKey = generateKey('agent');
    const row: PolicyRow = {
      id: newId('sgp'),
      name: input.name,
      agent_id: input.agentId,
      rules: JSON.stringify(canonicalRules(input.policy)),
      revision: 1,
      status: 'active',
      agent_status: 'active',
      direct_checks: 0,
      admin_key_hash: hashKey(adminKey),
      agent_key_hash: hashKey(agentKey),
      created_at: now.toISOString(),
      updated_at: now.toISOString(),
      access_expires_at: new Date(now.getTime() + PILOT_RETENTION_DAYS * 86_400_000).toISOString(),
      purged_at: null,
    };
    await this.database.db.insertInto('policies').values(row).execute();
    return { row, adminKey, agentKey };
  }

  async get(policyId: string): Promise<PolicyRow | undefined> {
    return loadPolicy(this.database, this.database.db, policyId);
  }

  /**
   * Replaces the rules and bumps the revision, only if the revision is still `expectedRevision`
   * when given: a compare-and-set, so two administrators cannot silently overwrite each other.
   */
  async replace(
    row: PolicyRow,
    change: { policy: PolicyRules; name?: string | undefined; status?: string | undefined; agentStatus?: string | undefined },
    expectedRevision: number | undefined,
    now: Date,
  ): Promise<PolicyRow | undefined> {
    const current = Number(row.revision);
    if (expectedRevision !== undefined && expectedRevision !== current) return undefined;
    // A field the body leaves out is not written at all: writing back the value read before the
    // update would undo a concurrent change, e.g. put an agent that another administrator has
    // just stopped back to work.
    const next = {
      rules: JSON.stringify(canonicalRules(change.policy)),
      ...(change.name !== undefined ? { name: change.name } : {}),
      ...(change.status !== undefined ? { status: change.status } : {}),
      ...(change.agentStatus !== undefined ? { agent_status: change.agentStatus } : {}),
      revision: sql<number>`revision + 1`,
      updated_at: now.toISOString(),
    };
    // Only while the admin key it was authorized with is still the policy's: a rotation of that
    // key that commits first ends whatever the old key had under way.
    let q = this.database.db.updateTable('policies').set(next).where('id', '=', row.id).where('admin_key_hash', '=', row.admin_key_hash);
    if (expectedRevision !== undefined) q = q.where('revision', '=', expectedRevision);
    // Never onto a policy that was purged (or whose access ended) after it was read: the purge
    // has emptied its rules and deleted its decisions, and the policy answers 410 from then on.
    q = live(q, now);
    // The row as this update left it: reading it again afterwards could return another
    // administrator's later change, with its revision as this answer's ETag.
    return q.returningAll().executeTakeFirst();
  }

  /**
   * A new agent key in place of the one `row` holds, or undefined when the key was replaced (or
   * the policy purged) since `row` was read. A compare-and-set: two rotations racing would
   * otherwise both answer a key, and the one written first would never work.
   */
  async rotateAgentKey(row: PolicyRow, now: Date): Promise<string | undefined> {
    return this.rotateKey(row, 'agent', now);
  }

  /**
   * Replaces the admin key of `row` (the one it was read with): the old key stops working at
   * once. Undefined when another rotation replaced it since, or the policy is no longer live.
   */
  async rotateAdminKey(row: PolicyRow, now: Date): Promise<string | undefined> {
    return this.rotateKey(row, 'admin', now);
  }

  private async rotateKey(row: PolicyRow, kind: 'admin' | 'agent', now: Date): Promise<string | undefined> {
    const key = generateKey(kind);
    const column = kind === 'admin' ? 'admin_key_hash' : 'agent_key_hash';
    const res = await live(
      this.database.db
        .updateTable('policies')
        .set({ [column]: hashKey(key), updated_at: now.toISOString() })
        .where('id', '=', row.id)
        .where(column, '=', row[column])
        // Both rotations are the admin key's: neither after that key was replaced (see replace).
        .where('admin_key_hash', '=', row.admin_key_hash),
      now,
    ).executeTakeFirst();
    return Number(res.numUpdatedRows) === 1 ? key : undefined;
  }

  /** False when the policy does not exist, was purged, or its access has ended. */
  async setDirectChecks(policyId: string, on: boolean, now: Date): Promise<boolean> {
    const res = await live(
      this.database.db
        .updateTable('policies')
        .set({ direct_checks: on ? 1 : 0, updated_at: now.toISOString() })
        .where('id', '=', policyId),
      now,
    ).executeTakeFirst();
    return Number(res.numUpdatedRows) === 1;
  }

  /** Policies whose access ended and whose data is still kept (see purge). */
  async expiredIds(now: Date): Promise<string[]> {
    // `purged_at is null` as written lets the partial index of migration 0012 serve it: the
    // tombstones of every policy ever purged are not read again each hour.
    const rows = await this.database.db
      .selectFrom('policies')
      .select('id')
      .where('access_expires_at', '<=', now.toISOString())
      .where(sql<boolean>`purged_at is null`)
      .execute();
    return rows.map((r) => r.id);
  }

  /**
   * Deletes an expired policy's decisions and budget rows, keeping a tombstone that answers 410.
   * The decisions go in chunks (purgeInChunks); nothing of the policy is readable meanwhile (its
   * access ended), and a purge cut off midway is finished by the next, as the tombstone is last.
   */
  async purge(id: string, now: Date, withTombstone: (tx: Tx) => Promise<void> = async () => {}): Promise<void> {
    await purgeInChunks(this.database, async (tx, limit) => {
      // The policy row first, as in every transaction that writes its rows: two purges of the
      // same policy at once (two instances, or the CLI beside the service) then take turns
      // instead of deadlocking on PostgreSQL.
      await loadPolicy(this.database, tx, id, true);
      const chunk = tx.selectFrom('decisions').select('id').where('policy_id', '=', id).limit(limit);
      return Number((await tx.deleteFrom('decisions').where('id', 'in', chunk).executeTakeFirst()).numDeletedRows);
    });
    // A write transaction from its first statement (BEGIN IMMEDIATE on SQLite): a deferred one
    // that reads first failed at once ("database is locked") when another process sharing the
    // file (`paywarden purge` beside the service) committed between its read and its delete.
    await writeTransaction(this.database, async (tx) => {
      // The policy row first, as decision batches lock it, so the two never deadlock.
      await loadPolicy(this.database, tx, id, true);
      await tx.deleteFrom('policy_day_repeats').where('policy_id', '=', id).execute();
      await tx.deleteFrom('policy_day_spend').where('policy_id', '=', id).execute();
      await tx.deleteFrom('decisions').where('policy_id', '=', id).execute();
      // What else belongs to the policy, written by a request that passed its access check just
      // before the expiry and committed since the caller's chunks (see purgeExpired).
      await withTombstone(tx);
      await tx
        .updateTable('policies')
        .set({ purged_at: now.toISOString(), rules: '{}', name: '', agent_id: '' })
        .where('id', '=', id)
        .execute();
    });
  }
}
