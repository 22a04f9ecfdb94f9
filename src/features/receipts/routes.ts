import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppDeps } from '../../app.js';
import type { ReceiptSigner } from '../../platform/receipts.js';

const Jwks = Type.Object({
  keys: Type.Array(
    Type.Object({
      kty: Type.Literal('OKP'),
      crv: Type.Literal('Ed25519'),
      x: Type.String(),
      kid: Type.String(),
      alg: Type.Literal('EdDSA'),
      use: Type.Literal('sig'),
    }),
  ),
});

export const jwksRoutes: FastifyPluginAsyncTypebox<AppDeps & { receipts: ReceiptSigner }> = async (app, deps) => {
  app.get(
    '/.well-known/jwks.json',
    {
      schema: {
        tags: ['catalogue'],
        operationId: 'getJwks',
        summary: 'Public keys that sign receipts',
        description:
          'To verify a receipt offline: compute sha256 over the RFC 8785 canonical JSON of the subject (the decision or report), compare with receipt.digest, then verify receipt.signature (base64url Ed25519) over those 32 digest bytes with the key whose kid is receipt.keyId. The first key signs new receipts; the others signed earlier ones (after a signing-key change) and stay published so that those still verify. A key the operator withdrew (it leaked) is no longer listed, and receipts it signed no longer verify.',
        response: { 200: Jwks },
      },
    },
    async () => deps.receipts.publishedJwks(deps.database),
  );
};
