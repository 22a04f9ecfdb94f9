import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppDeps } from '../../app.js';
import { parseUsdc } from '../../platform/money.js';
import { NETWORK, PAID_REPORTS } from '../../platform/prices.js';
import { problems } from '../../platform/schemas.js';
import { evaluatePolicy } from './rules.js';
import { EvaluateRequest, EvaluateResponse } from './schemas.js';

const optionalChecks = (['transactionPreflight', 'tokenRisk'] as const).map((name) => ({
  check: name === 'tokenRisk' ? 'token-risk' : 'transaction-preflight',
  method: PAID_REPORTS[name].method,
  endpoint: PAID_REPORTS[name].path,
  price: PAID_REPORTS[name].price,
  asset: 'USDC' as const,
  network: NETWORK,
  invoked: false as const,
  charged: false as const,
}));

/** The answer of the free evaluation to a validated request, at `now`. */
export function evaluation(body: EvaluateRequest, now: Date) {
  const { decision, reasons } = evaluatePolicy(
    {
      maxPerTransaction: parseUsdc(body.policy.maxPerTransaction),
      requireHumanAbove: parseUsdc(body.policy.requireHumanAbove),
      maxRepeats: body.policy.maxRepeats,
      allowedRecipients: body.policy.allowedRecipients,
      blockUnknownRecipients: body.policy.blockUnknownRecipients,
    },
    { recipient: body.recipient, amount: parseUsdc(body.amount) },
    {
      remainingDailyBudget: parseUsdc(body.policy.remainingDailyBudget),
      repeatCount: body.context?.repeatCount ?? 0,
      proofDecision: body.context?.proofDecision,
    },
  );
  return {
    decision,
    reasons,
    advisory: true as const,
    enforced: false as const,
    executionAuthorized: false as const,
    automaticPayment: false as const,
    agentId: body.agentId,
    requestId: body.requestId,
    evaluatedAt: now.toISOString(),
    optionalChecks,
  };
}

export const evaluateRoutes: FastifyPluginAsyncTypebox<AppDeps> = async (app, deps) => {
  app.post(
    '/api/spendpolicy/evaluate',
    {
      onRequest: deps.limiter.hook('evaluate'),
      schema: {
        tags: ['spend-policy'],
        operationId: 'evaluateSpend',
        summary: 'Evaluate a proposed USDC spend against a caller-supplied policy (free, stateless, advisory)',
        description:
          'Advisory only: the policy comes from the caller, so a separate trusted signer or approval service must enforce it. Nothing is stored, invoked or charged. Limited to 120 requests per 3600 s per source.',
        body: EvaluateRequest,
        response: { 200: EvaluateResponse, ...problems(400, 413, 415, 429) },
      },
    },
    async (request) => evaluation(request.body, deps.clock.now()),
  );
};
