import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppDeps } from '../../app.js';
import { problems, StringEnum, Text } from '../../platform/schemas.js';
import { LeadStore } from './store.js';

export const MONTHLY_DECISIONS = ['under-1k', '1k-10k', '10k-100k', 'over-100k', 'not-sure'] as const;

export const PilotLeadRequest = Type.Object(
  {
    email: Type.String({ format: 'email', maxLength: 254 }),
    company: Text({ minLength: 1, maxLength: 120 }),
    monthlyDecisions: StringEnum(MONTHLY_DECISIONS),
    needs: Text({ minLength: 10, maxLength: 1200 }),
  },
  { additionalProperties: false },
);

const PilotLeadResponse = Type.Object({
  id: Type.String({ pattern: '^lead_[0-9a-f]{32}$' }),
  status: Type.Literal('received'),
});

export const leadRoutes: FastifyPluginAsyncTypebox<AppDeps> = async (app, deps) => {
  const store = new LeadStore(deps.database);
  app.post(
    '/api/pilot-leads',
    {
      // After validation, as for policy creation: a form sent back with a typo (400) is no lead
      // sent, and must not use up the hour's leads of the person correcting it.
      preHandler: deps.limiter.hook('pilotLeads'),
      schema: {
        tags: ['leads'],
        operationId: 'createPilotLead',
        summary: 'Request a company pilot (a one-time 49 USDC bounded integration and validation pilot)',
        description: 'Creates no order and authorizes no payment. Contact data is kept for 90 days.',
        body: PilotLeadRequest,
        response: { 201: PilotLeadResponse, ...problems(400, 413, 415, 429) },
      },
    },
    async (request, reply) => {
      const { email, company, monthlyDecisions, needs } = request.body;
      const id = await store.insert({ email, company, monthlyDecisions, needs, source: request.ip }, deps.clock.now());
      return reply.status(201).send({ id, status: 'received' as const });
    },
  );
};
