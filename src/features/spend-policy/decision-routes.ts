import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppDeps } from '../../app.js';
import { problems } from '../../platform/schemas.js';
import { OPTIONAL_BODY } from '../../platform/openapi.js';
import type { DecisionService } from './decisions.js';
import { checkKey } from './policies.js';
import { ApproveRequest, DecisionId, DecisionRequest, DecisionWithReceipt } from './protected-schemas.js';

const Params = Type.Object({ decisionId: DecisionId });

export const decisionRoutes: FastifyPluginAsyncTypebox<AppDeps & { decisions: DecisionService }> = async (app, deps) => {
  app.post(
    '/api/spendpolicy/decisions',
    {
      schema: {
        tags: ['spend-policy'],
        operationId: 'createDecision',
        summary: 'Ask the protected policy for a decision (agent key); stored with a signed receipt',
        description:
          'The remaining daily budget (UTC day) and repeat counts come from stored decisions, never from the caller. APPROVE spends budget at once; HUMAN_APPROVAL spends nothing until an administrator approves. The same requestId with identical content returns the stored decision and spends nothing again; with different content 409. While the policy or agent is inactive every request is 403, a retry of an earlier one included. The decision never authorizes or executes a payment.',
        security: [{ agentKey: [] }],
        body: DecisionRequest,
        response: { 200: DecisionWithReceipt, ...problems(400, 401, 403, 404, 409, 410, 413, 415) },
      },
    },
    async (request) => {
      const key = checkKey(request.headers.authorization, { kinds: ['agent'], missing: 'agent_key_required' });
      const { decision, receipt } = await deps.decisions.decide(request.body, key, deps.clock.now());
      return { decision, receipt };
    },
  );

  app.get(
    '/api/spendpolicy/decisions/:decisionId',
    {
      schema: {
        tags: ['spend-policy'],
        operationId: 'getDecision',
        summary: "Read a stored decision and its receipt (the policy's admin or agent key)",
        security: [{ adminKey: [] }, { agentKey: [] }],
        params: Params,
        response: { 200: DecisionWithReceipt, ...problems(400, 401, 404, 410) },
      },
    },
    async (request) => {
      // The specification's 401 for decisions is "Agent key required"; the admin may read them too.
      const key = checkKey(request.headers.authorization, {
        kinds: ['admin', 'agent'],
        missing: 'agent_key_required',
        detail: "send the policy's agent key, or its admin key, as Authorization: Bearer <key>",
      });
      const { decision, receipt } = await deps.decisions.read(request.params.decisionId, key, deps.clock);
      return { decision, receipt };
    },
  );

  app.post(
    '/api/spendpolicy/decisions/:decisionId/approve',
    {
      schema: {
        tags: ['spend-policy'],
        operationId: 'approveDecision',
        summary: 'Approve a pending HUMAN_APPROVAL decision (admin key); spends the budget now',
        description:
          'The payment is spent at approval: it counts against the daily budget and repeat limit of the UTC day of the approval, which may be the day after the request. 409 when the policy revision changed since the decision, the budget or another limit no longer allows it, the policy or agent is inactive, or the decision is not pending; 410 when the approval request expired. The body is optional.',
        security: [{ adminKey: [] }],
        params: Params,
        body: ApproveRequest,
        // A bare POST approves without a note.
        [OPTIONAL_BODY]: true,
        response: { 200: DecisionWithReceipt, ...problems(400, 401, 404, 409, 410, 413, 415) },
      },
    },
    async (request) => {
      const key = checkKey(request.headers.authorization, { kinds: ['admin'], missing: 'admin_key_required' });
      const { decision, receipt } = await deps.decisions.approve(
        request.params.decisionId,
        key,
        request.body.note,
        deps.clock,
      );
      return { decision, receipt };
    },
  );
};
