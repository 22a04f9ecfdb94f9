/**
 * Experiment target (bench/experiments/ladder.ts): the evaluate route built up from bare Fastify,
 * adding the service's pieces one at a time. LADDER_STEP (0 to 6) says how far:
 *
 *   0  bare Fastify (pino silent, strict ajv) validating the evaluate request and echoing it
 *   1  + the service's handler (`evaluation` of evaluate-routes.ts) and the response schema
 *   2  + the service's validators and JSON body parser (src/platform/http.ts installValidators)
 *   3  + the service's Fastify options (logger options, request ids, body limit, timeouts)
 *   4  + its error handling and the x-request-id hook (installErrorHandling)
 *   5  + CORS (installCors)
 *   6  + @fastify/swagger; the real target adds only the other routes and the rate-limit hook
 *
 * LADDER_MODE=const (step >= 1) answers a constant response object through the same schema;
 * LADDER_MODE=noschema serializes the handler's answer with JSON.stringify.
 */
import swagger from '@fastify/swagger';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import Fastify from 'fastify';
import { loggerOptions } from '../../src/app.js';
import { testConfig } from '../../src/config.js';
import { evaluation } from '../../src/features/spend-policy/evaluate-routes.js';
import { EvaluateRequest, EvaluateResponse } from '../../src/features/spend-policy/schemas.js';
import { installCors } from '../../src/platform/cors.js';
import { BODY_LIMIT, frameworkError, genReqId, HTTP_OPTIONS, installErrorHandling, installValidators, type PathMethods } from '../../src/platform/http.js';
import { openApiOptions } from '../../src/platform/openapi.js';
import { problems } from '../../src/platform/schemas.js';
import { EVALUATE_BODY } from '../targets/evaluate.js';
import { EVALUATE_LOAD } from './evaluate-variant.js';
import type { TargetModule } from '../lib/types.js';

const step = Number(process.env.LADDER_STEP ?? 0);
const mode = process.env.LADDER_MODE ?? '';
const config = testConfig({ logLevel: 'silent' });
/** The example's answer, computed once: what serializing costs without the handler's work. */
const CONSTANT = evaluation(EVALUATE_BODY as EvaluateRequest, new Date());

const target: TargetModule = {
  async start() {
    const app = Fastify(
      step >= 3
        ? { logger: loggerOptions(config), genReqId, bodyLimit: BODY_LIMIT, trustProxy: false, routerOptions: { ignoreTrailingSlash: true }, frameworkErrors: frameworkError, ...HTTP_OPTIONS }
        : { logger: { level: 'silent' } },
    );
    if (step >= 2) installValidators(app);
    else {
      const ajv = addFormats.default(new Ajv.default({ allErrors: true, removeAdditional: false, useDefaults: false, coerceTypes: false, strict: false }));
      app.setValidatorCompiler(({ schema }) => ajv.compile(schema as object));
    }
    const pathMethods: PathMethods = step >= 4 ? installErrorHandling(app) : () => ({ path: '', allow: undefined });
    if (step >= 5) installCors(app, pathMethods);
    if (step >= 6) await app.register(swagger, openApiOptions(config));
    const response = step >= 1 && mode !== 'noschema' ? { response: { 200: EvaluateResponse, ...problems(400, 413, 415, 429) } } : {};
    app.post('/api/spendpolicy/evaluate', { schema: { body: EvaluateRequest, ...response } }, async (request) => {
      const body = request.body as EvaluateRequest;
      if (step < 1) return body;
      if (mode === 'const') return CONSTANT;
      return evaluation(body, new Date());
    });
    await app.ready();
    return {
      listen: (opts) => app.listen(opts),
      load: { ...EVALUATE_LOAD, description: `evaluate ladder step ${step}${mode ? ` (${mode})` : ''}`, expectBodyIncludes: '"agentId":"agent-7"' },
      close: () => app.close(),
    };
  },
};
export default target;
