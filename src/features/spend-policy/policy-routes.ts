import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppDeps } from '../../app.js';
import { AppError } from '../../platform/errors.js';
import { noStore } from '../../platform/http.js';
import { OPTIONAL_BODY } from '../../platform/openapi.js';
import { problems } from '../../platform/schemas.js';
import type { DecisionService } from './decisions.js';
import { authorizePolicy, checkKey, PolicyStore, toPolicy, type PolicyRow } from './policies.js';
import {
  AdminKeyResponse,
  AgentKeyResponse,
  CreatedPolicy,
  CreatePolicyRequest,
  DecisionList,
  DecisionListQuery,
  NoParameters,
  Policy,
  PolicyId,
  ReplacePolicyRequest,
} from './protected-schemas.js';

const Params = Type.Object({ policyId: PolicyId });
const adminOnly = { kinds: ['admin' as const], missing: 'admin_key_required' as const };
const adminSecurity = [{ adminKey: [] }];
/** Answers that carry the policy send its revision as the ETag, which If-Match names. */
const EtagHeader = { ETag: { type: 'string', description: 'The policy revision, quoted (e.g. "3"): send it back in If-Match. It changes with every PUT (rules and statuses), not with what the operator sets from the CLI (directChecks), which no PUT writes' } };

/**
 * The revisions If-Match names, or undefined when it names any (absent, or `*`). It is a list of
 * entity tags (RFC 9110 §13.1.1): `If-Match: "3"` (the ETag of GET) names revision 3, and a list
 * such as `"3", "4"` names both. W/"3" names it too: the ETag is the revision itself, not a digest
 * of the bytes, and a proxy that compresses the JSON (nginx with gzip) weakens it on the way, so
 * refusing weak tags would make If-Match unusable behind one. A bare 3 is accepted too. A
 * well-formed tag that is no revision ("abc", "") names none, so it gets 412 like a stale one;
 * a header that is no list of entity tags (an unbalanced quote, a word) is a 400.
 */
function ifMatchRevisions(header: string | undefined): ReadonlySet<number> | undefined {
  if (header === undefined || header.trim() === '*') return undefined;
  const revisions = new Set<number>();
  let tags = 0;
  for (let pos = 0; pos < header.length; tags++) {
    // Empty list elements (`"3", , "4"`, a leading or trailing comma) are skipped (RFC 9110 §5.6.1.2).
    EMPTY_ELEMENTS.lastIndex = pos;
    if (EMPTY_ELEMENTS.test(header)) pos = EMPTY_ELEMENTS.lastIndex;
    if (pos === header.length) break;
    ENTITY_TAG.lastIndex = pos;
    const m = ENTITY_TAG.exec(header);
    if (!m) throw new AppError('invalid_request', 'If-Match must be the policy revision as its ETag gives it, e.g. "3"');
    const tag = m[1] ?? m[2]!;
    if (/^[1-9][0-9]{0,8}$/.test(tag)) revisions.add(Number(tag));
    pos = ENTITY_TAG.lastIndex;
  }
  if (!tags) throw new AppError('invalid_request', 'If-Match names no entity tag');
  return revisions;
}
/** Empty elements of a list: white space and commas, up to the next element or the end. */
const EMPTY_ELEMENTS = /(?:[ \t]*,)+[ \t]*|[ \t]+$/y;
/** One element of an If-Match list: an entity tag (weak or strong) or a bare revision, then a comma or the end. */
const ENTITY_TAG = /[ \t]*(?:(?:W\/)?"([\x21\x23-\x7e\x80-\xff]*)"|([0-9]{1,9}))[ \t]*(?:,|$)/y;

export const policyRoutes: FastifyPluginAsyncTypebox<AppDeps & { decisions: DecisionService }> = async (app, deps) => {
  const store = new PolicyStore(deps.database);
  const adminPolicy = async (policyId: string, authorization: string | undefined) => {
    const key = checkKey(authorization, adminOnly);
    return authorizePolicy(await store.get(policyId), key, deps.clock.now());
  };
  /**
   * After a write that matched no row: the policy was purged, or its access ended, since it was
   * read (410, as every later request will hear); or the admin key the request came with was
   * replaced meanwhile (404, as for any key that is not the policy's); or else what `conflict`
   * describes happened. `at` is the time the write was made for: judged at another time, a clock
   * stepped back could find neither reason and blame `conflict`.
   */
  const unwritten = async (read: PolicyRow, at: Date, conflict: AppError): Promise<never> => {
    const current = await store.get(read.id);
    if (!current || current.purged_at || at.toISOString() >= current.access_expires_at) {
      throw new AppError('expired', 'protected-policy access has expired');
    }
    if (current.admin_key_hash !== read.admin_key_hash) throw new AppError('not_found', 'policy or key not found');
    throw conflict;
  };

  app.post(
    '/api/spendpolicy/policies',
    {
      // Counted after validation: the limit is on creations, so a rejected body uses none of it.
      preHandler: deps.limiter.hook('policyCreate'),
      // The answer holds keys shown once: no cache may keep it.
      onSend: noStore,
      schema: {
        tags: ['spend-policy'],
        operationId: 'createPolicy',
        summary: 'Create a protected spend policy; answers one admin key and one agent key, each shown once',
        description: `Keys are stored only as SHA-256 hashes and cannot be recovered. Pilot access lasts 30 days. A source may create ${deps.config.policyCreateLimit} policies per day.`,
        body: CreatePolicyRequest,
        response: { 201: { ...CreatedPolicy, headers: EtagHeader }, ...problems(400, 413, 415, 429) },
      },
    },
    async (request, reply) => {
      const { row, adminKey, agentKey } = await store.create(request.body, deps.clock.now());
      reply.header('etag', `"${row.revision}"`);
      return reply.status(201).send({ ...toPolicy(row), adminKey, agentKey });
    },
  );

  app.get(
    '/api/spendpolicy/policies/:policyId',
    {
      schema: {
        tags: ['spend-policy'],
        operationId: 'getPolicy',
        summary: 'Read a policy (admin key); never shows secret hashes',
        security: adminSecurity,
        params: Params,
        response: { 200: { ...Policy, headers: EtagHeader }, ...problems(400, 401, 404, 410) },
      },
    },
    async (request, reply) => {
      const row = await adminPolicy(request.params.policyId, request.headers.authorization);
      reply.header('etag', `"${row.revision}"`);
      return toPolicy(row);
    },
  );

  app.put(
    '/api/spendpolicy/policies/:policyId',
    {
      schema: {
        tags: ['spend-policy'],
        operationId: 'replacePolicy',
        summary: 'Replace the policy rules (admin key); revision + 1',
        description:
          'Send If-Match: "<revision>" (the ETag) to replace only the revision you read: 412 when the policy is at another revision, 400 when If-Match is not a list of entity tags. Pending HUMAN_APPROVAL decisions made under an older revision can no longer be approved.',
        security: adminSecurity,
        params: Params,
        headers: Type.Object({ 'if-match': Type.Optional(Type.String()) }),
        body: ReplacePolicyRequest,
        response: { 200: { ...Policy, headers: EtagHeader }, ...problems(400, 401, 404, 410, 412, 413, 415) },
      },
    },
    async (request, reply) => {
      const named = ifMatchRevisions(request.headers['if-match']);
      const row = await adminPolicy(request.params.policyId, request.headers.authorization);
      // The revision If-Match names, which the write checks is still the policy's; any other is 412 now.
      let expected: number | undefined;
      if (named) {
        expected = Number(row.revision);
        if (!named.has(expected)) {
          throw new AppError('precondition_failed', `the policy is at revision ${expected}, which If-Match does not name; read it again`);
        }
      }
      const now = deps.clock.now();
      const updated =
        (await store.replace(row, request.body, expected, now)) ??
        (await unwritten(row, now, new AppError('precondition_failed', `the policy is no longer at revision ${expected}; read it again`)));
      reply.header('etag', `"${updated.revision}"`);
      return toPolicy(updated);
    },
  );

  app.get(
    '/api/spendpolicy/policies/:policyId/decisions',
    {
      schema: {
        tags: ['spend-policy'],
        operationId: 'listPolicyDecisions',
        summary: 'List the decisions of a policy, newest first (admin key); status=PENDING finds what waits for approval',
        security: adminSecurity,
        params: Params,
        querystring: DecisionListQuery,
        response: { 200: DecisionList, ...problems(400, 401, 404, 410) },
      },
    },
    async (request) => {
      const row = await adminPolicy(request.params.policyId, request.headers.authorization);
      const q = request.query;
      return deps.decisions.list(row, { status: q.status, decision: q.decision, limit: q.limit ?? 50, cursor: q.cursor }, deps.clock.now());
    },
  );

  app.post(
    '/api/spendpolicy/policies/:policyId/agent-key',
    {
      onSend: noStore,
      schema: {
        tags: ['spend-policy'],
        operationId: 'rotateAgentKey',
        summary: 'Replace the agent key (admin key); the old one stops working at once',
        description:
          'Answers 409 when another request replaced the agent key after this one read the policy: the key that request answered is the one in force. Rotate again for a key of your own (which ends that one). Decisions the old key asked for stay as they are: its pending HUMAN_APPROVAL requests can still be approved (or expire), so review the PENDING list before approving any.',
        security: adminSecurity,
        params: Params,
        body: NoParameters,
        [OPTIONAL_BODY]: true,
        response: { 200: AgentKeyResponse, ...problems(400, 401, 404, 409, 410, 413, 415) },
      },
    },
    async (request) => {
      const row = await adminPolicy(request.params.policyId, request.headers.authorization);
      const now = deps.clock.now();
      const agentKey =
        (await store.rotateAgentKey(row, now)) ??
        (await unwritten(row, now, new AppError('conflict', 'another request replaced the agent key at the same time; its key is the one in force (rotate again for a new one)')));
      return { policyId: row.id, agentKey };
    },
  );
  app.post(
    '/api/spendpolicy/policies/:policyId/admin-key',
    {
      onSend: noStore,
      schema: {
        tags: ['spend-policy'],
        operationId: 'rotateAdminKey',
        summary: 'Replace the admin key (admin key); the old one stops working at once',
        description:
          'For an admin key that leaked: the answer is the only place the new key is shown. Of two rotations at once, one answers the new key and the other 404, as the key it came with no longer exists; so does any write (PUT, a rotation) with the old key that was still under way. An administrator locked out (the key lost, or replaced by whoever took it) asks the operator (`paywarden policy admin-key`).',
        security: adminSecurity,
        params: Params,
        body: NoParameters,
        [OPTIONAL_BODY]: true,
        response: { 200: AdminKeyResponse, ...problems(400, 401, 404, 410, 413, 415) },
      },
    },
    async (request) => {
      const row = await adminPolicy(request.params.policyId, request.headers.authorization);
      const now = deps.clock.now();
      // Unwritten only when the policy ended (410) or the admin key was replaced meanwhile (404).
      const adminKey = (await store.rotateAdminKey(row, now)) ?? (await unwritten(row, now, new AppError('internal_error')));
      return { policyId: row.id, adminKey };
    },
  );
};
