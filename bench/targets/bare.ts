import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import Fastify from 'fastify';
import { injectWith, type TargetModule } from '../lib/types.js';

export const BARE_BODY = { agentId: 'agent-7', amount: '12.50', count: 3 };

/** Fastify 5 with the service's strict body validation (ajv options below) and logger level. */
export function bareFastify() {
  const app = Fastify({ logger: { level: process.env.BENCH_LOG_LEVEL ?? 'silent' } });
  const ajv = addFormats.default(
    new Ajv.default({ allErrors: true, removeAdditional: false, useDefaults: false, coerceTypes: false, strict: false }),
  );
  app.setValidatorCompiler(({ schema }) => ajv.compile(schema as object));
  return app;
}

/**
 * The reference: a bare Fastify 5 route that validates a small JSON object as strictly as the
 * service does (the same ajv options as src/platform/http.ts for bodies: no coercion, no
 * defaults, no stripping, allErrors, formats; additionalProperties false) and echoes it.
 * Deliberately self-contained, so that changes to the service never move the baseline.
 * Same logger setting as the service target (pino at level silent; BENCH_LOG_LEVEL overrides).
 */
const target: TargetModule = {
  async start() {
    const app = bareFastify();
    app.post(
      '/echo',
      {
        schema: {
          body: {
            type: 'object',
            additionalProperties: false,
            required: ['agentId', 'amount', 'count'],
            properties: {
              agentId: { type: 'string', minLength: 1, maxLength: 80 },
              amount: { type: 'string', pattern: '^[0-9]{1,12}(\\.[0-9]{1,6})?$' },
              count: { type: 'integer', minimum: 0 },
            },
          },
        },
      },
      async (request) => request.body,
    );
    await app.ready();
    return {
      listen: (opts) => app.listen(opts),
      inject: injectWith(app),
      load: {
        description: 'bare Fastify 5 POST /echo (strict ajv body validation, echo)',
        requests: [
          { method: 'POST', path: '/echo', headers: { 'content-type': 'application/json' }, body: JSON.stringify(BARE_BODY) },
        ],
        expectStatus: 200,
        expectBodyIncludes: '"agentId":"agent-7"',
      },
      close: () => app.close(),
    };
  },
};

export default target;
