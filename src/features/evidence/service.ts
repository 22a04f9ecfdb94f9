import type { Database } from '../../platform/db/database.js';
import { AppError } from '../../platform/errors.js';
import { newId } from '../../platform/ids.js';
import { sameHash } from '../../platform/keys.js';
import type { RateLimiter } from '../../platform/rate-limit.js';
import type { DecisionService } from '../spend-policy/decisions.js';
import { toDecision } from '../spend-policy/decisions.js';
import { authorizePolicy, loadPolicy, type PolicyRow } from '../spend-policy/policies.js';
import type { Decision } from '../spend-policy/protected-schemas.js';
import type { ReceiptSigner } from '../../platform/receipts.js';
import { HEAD_RECEIPT_KIND, headSubject, intentDigestOf, normaliseIntent, type ChainHead, type Intent } from './hashing.js';
import { EvidenceStore, storage, type ChainRow, type StoredChain } from './store.js';
import { summarise, type Summary } from './summary.js';

export type AgentKey = { kind: 'agent'; hash: string };

export interface CreatedChain {
  evidenceChainId: string;
  intentDigest: string;
  decision: Decision['decision'];
  reasons: Decision['reasons'];
  policyRevision: number;
  decisionId: string;
  executionAuthorized: false;
  replayed: boolean;
}

/**
 * Evidence chains: create (a protected decision plus an immutable intent, in one commit), read
 * and summarise, and the access rules every evidence endpoint shares.
 *
 * Budget namespace: a chain's requestId is a protected decision's requestId under the same
 * policy (one unique (policyId, requestId) in the decisions table, one daily budget). So:
 * - the same intent again answers the stored chain (200, replayed) and spends nothing;
 * - a changed intent under that requestId is 409;
 * - a requestId a plain decision already used cannot start a chain (409): that decision may
 *   already have spent budget, and a chain must hold the decision it was created with;
 * - a plain decision with a chain's requestId gets the chain's decision back when its content
 *   is identical (nothing spent twice), 409 otherwise (the decisions endpoint's own rule).
 */
export class EvidenceService {
  readonly store: EvidenceStore;

  constructor(
    private readonly database: Database,
    private readonly decisions: DecisionService,
    private readonly limiter: RateLimiter,
    private readonly signer: ReceiptSigner,
  ) {
    this.store = new EvidenceStore(database, signer);
  }

  async create(input: Intent, key: AgentKey, now: Date): Promise<CreatedChain> {
    const intent = normaliseIntent(input);
    const intentDigest = intentDigestOf(intent);
    await this.admit(await storage(() => loadPolicy(this.database, this.database.db, intent.policyId)), key, now);
    // Through the decisions' group commit: chains and plain decisions of a policy run one after
    // another under its lock (and share a durable commit), so one budget binds both.
    return storage(() =>
      this.decisions.writes.run([intent.policyId], async (tx) => {
        const policy = authorizePolicy(await loadPolicy(this.database, tx, intent.policyId, true), key, now);
        assertActive(policy);
        const existing = await this.store.chainByRequest(tx, policy.id, intent.requestId);
        if (existing) {
          if (existing.intent_digest !== intentDigest) {
            throw new AppError('intent_conflict', 'this requestId already has an evidence chain with a different intent');
          }
          const precheck = (await this.store.events(tx, existing.id, 'PRECHECK_COMPLETED'))[0];
          return created(existing, precheck?.body.decision as Decision, true);
        }
        const plain = await tx
          .selectFrom('decisions')
          .select('id')
          .where('policy_id', '=', policy.id)
          .where('request_id', '=', intent.requestId)
          .executeTakeFirst();
        if (plain) throw new AppError('intent_conflict', 'this requestId was already used by a protected decision outside an evidence chain');

        const { decision, receipt } = await this.decisions.decideIn(
          tx,
          { policyId: policy.id, requestId: intent.requestId, agentId: intent.agentId, chain: 'base', asset: 'USDC', recipient: intent.recipient, amount: intent.amount },
          key,
          now,
        );
        const row: ChainRow = {
          id: newId('ec'),
          policy_id: policy.id,
          request_id: intent.requestId,
          decision_id: decision.decisionId,
          intent: JSON.stringify(intent),
          intent_digest: intentDigest,
          created_at: now.toISOString(),
        };
        await this.store.insertChain(tx, row);
        await this.store.append(tx, row, 'PRECHECK_COMPLETED', { decision, receipt }, now);
        return created(row, decision, false);
      }),
    );
  }

  /** The chain with a head signed now: its length and last hash, so a shortened copy shows. */
  async read(chainId: string, key: AgentKey, now: Date): Promise<StoredChain & { head: ChainHead }> {
    const { chain } = await this.access(chainId, key, now);
    const stored = await storage(() => this.store.read(this.database.db, chain));
    const last = stored.events.at(-1);
    const head = { evidenceChainId: stored.evidenceChainId, length: stored.events.length, headHash: last ? last.hash : stored.intentDigest, issuedAt: now.toISOString() };
    return { ...stored, head: { ...head, receipt: this.signer.sign(HEAD_RECEIPT_KIND, stored.evidenceChainId, headSubject(head), now) } };
  }

  async summary(chainId: string, key: AgentKey, now: Date): Promise<Summary> {
    const { chain } = await this.access(chainId, key, now);
    return storage(async () => {
      const stored = await this.store.read(this.database.db, chain);
      const row = await this.database.db.selectFrom('decisions').selectAll().where('id', '=', chain.decision_id).executeTakeFirst();
      return summarise(stored, row ? toDecision(row, now).approval : undefined);
    });
  }

  /**
   * The rules of every endpoint on an existing chain: a key of another policy, or an unknown
   * chain, is 404 (never telling which); ended access 410; then the per-policy limit (429);
   * an inactive policy or agent 403.
   */
  async access(chainId: string, key: AgentKey, now: Date): Promise<{ chain: ChainRow; policy: PolicyRow }> {
    const found = await storage(async () => {
      const chain = await this.store.chainById(this.database.db, chainId);
      const policy = chain && (await loadPolicy(this.database, this.database.db, chain.policy_id));
      const expected = policy?.agent_key_hash;
      // Someone else's chain reads exactly as no chain, for every key (expired ones included).
      if (!chain || !policy || !expected || !sameHash(expected, key.hash)) {
        if (await this.store.isExpiredAgentKey(key.hash, now)) throw new AppError('expired', 'protected-policy access has expired');
        throw new AppError('not_found', 'evidence chain or key not found');
      }
      return { chain, policy };
    });
    const policy = await this.admit(found.policy, key, now);
    assertActive(policy);
    return { chain: found.chain, policy };
  }

  /** Key (404/410) and per-policy request limit (429). */
  private async admit(row: PolicyRow | undefined, key: AgentKey, now: Date): Promise<PolicyRow> {
    const policy = authorizePolicy(row, key, now);
    try {
      await this.limiter.consume('evidence', `policy:${policy.id}`);
    } catch (err) {
      if (!(err instanceof AppError) || err.code !== 'rate_limited') throw err;
      throw new AppError('rate_limited', `evidence request limit of this policy reached; retry after ${err.retryAfter} s`, {
        title: err.title,
        ...(err.retryAfter !== undefined ? { retryAfter: err.retryAfter } : {}),
      });
    }
    return policy;
  }
}

export function assertActive(policy: PolicyRow): void {
  if (policy.status !== 'active') throw new AppError('inactive', 'the policy is inactive');
  if (policy.agent_status !== 'active') throw new AppError('inactive', 'the agent is inactive');
}

function created(row: ChainRow, decision: Decision, replayed: boolean): CreatedChain {
  return {
    evidenceChainId: row.id,
    intentDigest: row.intent_digest,
    decision: decision.decision,
    reasons: decision.reasons,
    policyRevision: decision.policyRevision,
    decisionId: row.decision_id,
    executionAuthorized: false,
    replayed,
  };
}
