import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type, type TSchema } from 'typebox';
import type { AppDeps } from '../../app.js';
import { API_VERSION } from '../../platform/openapi.js';
import { NETWORK, PAID_REPORTS, USDC_ADDRESS, type PaidReportName } from '../../platform/prices.js';
import { PaymentProofRequest, PreflightRequest } from '../reports/schemas.js';
import { EvaluateRequest } from '../spend-policy/schemas.js';
import { TokenAddressRequest } from '../tokens/schemas.js';
import { TERMS, PRIVACY } from './documents.js';

const FREE_TOOLS: Array<{ name: string; endpoint: string; method: string; description: string; input: TSchema }> = [
  { name: 'token-preview', endpoint: '/api/token-preview', method: 'POST', description: 'Token identity and market preview; no security verdict', input: TokenAddressRequest },
  { name: 'token-coverage', endpoint: '/api/token-coverage', method: 'POST', description: 'Which evidence the paid token-risk report could cover for a token', input: TokenAddressRequest },
  { name: 'spendpolicy-evaluate', endpoint: '/api/spendpolicy/evaluate', method: 'POST', description: 'Stateless advisory spend-policy evaluation', input: EvaluateRequest },
];

const PAID_INPUT: Record<PaidReportName, TSchema | null> = {
  tokenRisk: TokenAddressRequest,
  transactionPreflight: PreflightRequest,
  paymentProof: PaymentProofRequest,
  quickCheck: null,
};

const Entry = Type.Object({
  name: Type.String(),
  endpoint: Type.String(),
  method: Type.String(),
  network: Type.String(),
  paymentAsset: Type.Object({ symbol: Type.Literal('USDC'), address: Type.String(), decimals: Type.Integer() }),
  price: Type.String({ description: 'USDC per request (free tools: 0)' }),
  description: Type.String(),
  inputSchema: Type.Union([Type.Object({}, { additionalProperties: true }), Type.Null()]),
});

const Catalogue = Type.Object({
  service: Type.String(),
  version: Type.String(),
  description: Type.String(),
  freeTools: Type.Array(Entry),
  paidServices: Type.Array(Entry),
  evidenceLayer: Type.Object({
    release: Type.String(),
    endpoint: Type.String(),
    auth: Type.String(),
    createRead: Type.String(),
    directChecks: Type.String(),
    automaticPayment: Type.Literal(false),
    executionAuthorized: Type.Literal(false),
  }),
  x402: Type.Boolean(),
  x402Version: Type.Literal(2),
  automaticPayment: Type.Literal(false),
  executionAuthorized: Type.Literal(false),
  links: Type.Object({ openapi: Type.String(), terms: Type.String(), privacy: Type.String() }),
});

const paymentAsset = { symbol: 'USDC' as const, address: USDC_ADDRESS, decimals: 6 };

export const catalogueRoutes: FastifyPluginAsyncTypebox<AppDeps> = async (app, deps) => {
  const base = deps.config.publicBaseUrl;
  // Lists only what this build actually serves, so the catalogue never advertises a 404.
  const served = (method: string, url: string) => app.hasRoute({ method: method as 'GET', url });
  const jsonSchema = (s: TSchema | null) => (s ? (JSON.parse(JSON.stringify(s)) as Record<string, unknown>) : null);

  let catalogue: unknown;
  app.addHook('onReady', async () => {
    const evidence = served('POST', '/api/evidence-chains');
    catalogue = {
      service: 'paywarden',
      version: API_VERSION,
      description: 'Payment-safety and spend-policy checks for USDC on Base. Never holds keys, signs, executes or authorizes a payment.',
      freeTools: FREE_TOOLS.filter((t) => served(t.method, t.endpoint)).map((t) => ({
        name: t.name, endpoint: t.endpoint, method: t.method, network: NETWORK, paymentAsset, price: '0',
        description: t.description, inputSchema: jsonSchema(t.input),
      })),
      paidServices: (Object.keys(PAID_REPORTS) as PaidReportName[])
        .filter((n) => served(PAID_REPORTS[n].method, PAID_REPORTS[n].path))
        .map((n) => ({
          name: PAID_REPORTS[n].path.replace('/api/', ''), endpoint: PAID_REPORTS[n].path, method: PAID_REPORTS[n].method,
          network: NETWORK, paymentAsset, price: PAID_REPORTS[n].price, description: PAID_REPORTS[n].description,
          inputSchema: jsonSchema(PAID_INPUT[n]),
        })),
      evidenceLayer: {
        release: `${API_VERSION} (release candidate)`,
        endpoint: '/api/evidence-chains',
        auth: 'agent bearer key',
        createRead: evidence ? 'available' : 'not enabled on this deployment',
        directChecks: evidence ? 'restricted pilot: preflight and settlement need explicit per-policy activation' : 'not enabled on this deployment',
        automaticPayment: false,
        executionAuthorized: false,
      },
      x402: true,
      x402Version: 2,
      automaticPayment: false,
      executionAuthorized: false,
      links: { openapi: `${base}/openapi.json`, terms: `${base}/terms`, privacy: `${base}/privacy` },
    };
  });

  app.get('/api/services', { schema: { tags: ['catalogue'], operationId: 'getCatalogue', summary: 'Public catalogue of free tools and paid services', response: { 200: Catalogue } } }, async () => catalogue as never);
  // Content declared per media type: the generator documents it as given, and Fastify serializes
  // the document with a schema that keeps every member (the texts are strings, sent as they are).
  const document = { description: 'This OpenAPI 3.1.0 document', content: { 'application/json': { schema: Type.Object({}, { additionalProperties: true }) } } };
  const text = { description: 'Plain text', content: { 'text/plain': { schema: Type.String() } } };
  // Serialized once, on the first request (the routes are all registered by then): built and
  // serialized anew, the 312 KB it then had cost 10 ms of CPU per request, for anyone to ask for, pipelined.
  let openapi: Buffer | undefined;
  app.get('/openapi.json', { schema: { tags: ['catalogue'], operationId: 'getOpenApiDocument', summary: 'This OpenAPI 3.1.0 document', response: { 200: document } } }, async (_req, reply) => {
    openapi ??= Buffer.from(JSON.stringify(app.swagger()));
    return reply.type('application/json; charset=utf-8').send(openapi);
  });
  app.get('/terms', { schema: { tags: ['catalogue'], operationId: 'getTerms', summary: 'Terms of service (plain text)', response: { 200: text } } }, async (_req, reply) => reply.type('text/plain; charset=utf-8').send(TERMS));
  app.get('/privacy', { schema: { tags: ['catalogue'], operationId: 'getPrivacy', summary: 'Privacy policy (plain text)', response: { 200: text } } }, async (_req, reply) => reply.type('text/plain; charset=utf-8').send(PRIVACY));
};
