/**
 * A reference of `npm run bench`, not a target: the bare Fastify app of bench/targets/bare.ts
 * (same logger and ajv options) validating the evaluate request schema and echoing the body:
 * what the size and shape of the evaluate payload cost, with no service code at all.
 */
import { EvaluateRequest } from '../../src/features/spend-policy/schemas.js';
import { EVALUATE_BODY } from './evaluate.js';
import { injectWith, type TargetModule } from '../lib/types.js';
import { bareFastify } from './bare.js';

const target: TargetModule = {
  async start() {
    const app = bareFastify();
    app.post('/api/spendpolicy/evaluate', { schema: { body: EvaluateRequest } }, async (request) => request.body);
    await app.ready();
    return {
      listen: (opts) => app.listen(opts),
      inject: injectWith(app),
      load: {
        description: 'bare Fastify 5, strict ajv validation of the evaluate request schema, echo (reference)',
        requests: [{ method: 'POST', path: '/api/spendpolicy/evaluate', headers: { 'content-type': 'application/json' }, body: JSON.stringify(EVALUATE_BODY) }],
        expectStatus: 200,
        expectBodyIncludes: '"agentId":"agent-7"',
      },
      close: () => app.close(),
    };
  },
};

export default target;
