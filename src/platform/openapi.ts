import type { SwaggerOptions } from '@fastify/swagger';
import type { Config } from '../config.js';
import { NETWORK, USDC_ADDRESS } from './prices.js';

export const API_VERSION = '1.5.0-rc.1';

/** The OpenAPI document is generated from the route schemas; this adds what routes cannot say. */
export function openApiOptions(config: Config): SwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Paywarden: Base USDC payment-safety and spend-policy service',
        version: API_VERSION,
        description: [
          'Free advisory tools, protected spend policies kept outside the agent, paid safety reports over x402, and tamper-evident evidence chains for USDC on Base.',
          'The service never holds keys, never signs, never executes and never authorizes a payment: executionAuthorized is always false, and no paid check is invoked or charged automatically.',
          '',
          '**Errors** are RFC 9457 problem bodies (`application/problem+json`) with a stable `code` and the `requestId`; every 429 carries `Retry-After`.',
          '',
          `**Payment (x402 v2).** Paid reports answer a request without a \`PAYMENT-SIGNATURE\` header with 402 and a \`PAYMENT-REQUIRED\` header (base64 JSON: x402Version 2, scheme exact, network ${NETWORK}, asset USDC ${USDC_ADDRESS}, the report's price). An x402 v2 client authorizes that amount and retries the same request with \`PAYMENT-SIGNATURE\`; a 200 carries the report and \`PAYMENT-RESPONSE\`. A 402 never charges; its body is a problem body like every other error (code \`payment_required\`, or \`payment_invalid\` with the reason when a payment was not accepted), and x402 clients read the challenge from the header. Input is validated before any payment is asked for.`,
        ].join('\n'),
      },
      servers: [{ url: config.publicBaseUrl }],
      tags: [
        { name: 'catalogue', description: 'Service catalogue and documents' },
        { name: 'spend-policy', description: 'Free evaluation and protected spend policies' },
        { name: 'leads', description: 'Company pilot requests' },
        { name: 'health', description: 'Liveness and readiness' },
      ],
      components: {
        securitySchemes: {
          adminKey: {
            type: 'http',
            scheme: 'bearer',
            description: 'The policy admin key (sgp_admin_…), shown once at policy creation',
          },
          agentKey: {
            type: 'http',
            scheme: 'bearer',
            description: 'The policy agent key (sgp_agent_…), shown once at policy creation',
          },
          x402: {
            type: 'apiKey',
            in: 'header',
            name: 'PAYMENT-SIGNATURE',
            description: 'x402 v2 payment authorization answering the PAYMENT-REQUIRED challenge of a 402',
          },
        },
      },
    },
  };
}
