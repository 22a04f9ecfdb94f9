import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { AppDeps } from '../../app.js';
import { createChainClient, type ChainClient } from '../../platform/chain.js';
import type { ReceiptSigner } from '../../platform/receipts.js';
import { problems } from '../../platform/schemas.js';
import { normalisePreflightInput, preflightInputDigest, transactionPreflight } from '../preflight/preflight.js';
import { gatherEvidence } from '../reports/payment-proof.js';
import { PreflightRequest, checkPreflightRequest } from '../reports/schemas.js';
import type { DecisionService } from '../spend-policy/decisions.js';
import { checkKey } from '../spend-policy/policies.js';
import { DirectChecks, type PreflightPort } from './checks.js';
import { ChainParams, CreatedChain, EvidenceChain, Intent, PreflightResponse, SettlementRequest, SettlementResponse, Summary } from './schemas.js';
import { EvidenceService } from './service.js';

export interface EvidenceRouteDeps extends AppDeps {
  decisions: DecisionService;
  receipts: ReceiptSigner;
  chain?: ChainClient;
  /** The transaction preflight; the paid report's own by default. */
  preflight?: PreflightPort;
}

const ALL = [400, 401, 403, 404, 410, 429, 503];
/** What only a request with a body can be answered (Fastify reads no body on GET). */
const BODY = [413, 415];
const tags = ['evidence-chains'];
const security = [{ agentKey: [] }];
const agentKey = (authorization: string | undefined) => checkKey(authorization, { kinds: ['agent'], missing: 'agent_bearer_key_required' });

/** The evidence-chain endpoints (release candidate); EVIDENCE_CHAINS=off leaves them unserved (404). */
export const evidenceRoutes: FastifyPluginAsyncTypebox<EvidenceRouteDeps> = async (app, deps) => {
  if (!deps.config.evidenceChains) return;
  const service = new EvidenceService(deps.database, deps.decisions, deps.limiter, deps.receipts);
  const chain = deps.chain ?? createChainClient(deps.config);
  const checks = new DirectChecks({
    database: deps.database,
    service,
    signer: deps.receipts,
    preflight: deps.preflight ?? {
      run: async (input, now) => (await transactionPreflight(chain, input, now, { logBlockRange: deps.config.rpcLogBlockRange })) as unknown as Record<string, unknown>,
      digest: preflightInputDigest,
      normalise: normalisePreflightInput,
    },
    readTransaction: (hash) => gatherEvidence(chain, hash, { blockTime: true }),
    minConfirmations: deps.config.minConfirmations,
  });

  app.post(
    '/api/evidence-chains',
    {
      schema: {
        tags,
        security,
        operationId: 'createEvidenceChain',
        summary: 'Create an evidence chain: an immutable payment intent and a protected decision (agent key)',
        description:
          'Makes a protected decision under the policy (same rules, same daily budget as /api/spendpolicy/decisions) and stores it with the intent; the chain starts with a PRECHECK_COMPLETED event holding the decision and its signed receipt. 201 when created; the identical intent again answers 200 with replayed true and spends nothing; a changed intent under the same policyId and requestId is 409, as is a requestId already used by a plain decision. Never authorizes or executes a payment and runs no paid check.',
        body: Intent,
        response: {
          200: { ...CreatedChain, description: 'The identical intent again: the chain as created, replayed true; nothing spent' },
          201: { ...CreatedChain, description: 'Created: the chain and its protected decision' },
          ...problems(...ALL, ...BODY, 409),
        },
      },
    },
    async (request, reply) => {
      const created = await service.create(request.body, agentKey(request.headers.authorization), deps.clock.now());
      return reply.status(created.replayed ? 200 : 201).send(created);
    },
  );

  app.get(
    '/api/evidence-chains/:evidenceChainId',
    {
      schema: {
        tags,
        security,
        operationId: 'getEvidenceChain',
        summary: 'Read a chain: the intent, its digest and every event in order, hash-linked',
        description:
          "A key of another policy gets 404, as an unknown chain does. Every event carries a linkReceipt signed when it was appended over its hash (which covers prevHash, so every event before it and the intent too); head is signed at read time over the chain's length and last hash. Anyone can check the chain offline with only the JWKS: `paywarden evidence verify <chain.json> --jwks <file|url>` recomputes the intent digest and every event hash, checks the order of events (one PRECHECK_COMPLETED first, at most one preflight, no settlement after a MATCH nor of a transaction after its final result, unique evidenceIds, createdAt never going back) and verifies every receipt, link and the head. Events recorded before links were signed have no linkReceipt; verify names them as unsigned, a warning when the signed head (which covers every event) verifies.",
        params: ChainParams,
        response: { 200: EvidenceChain, ...problems(...ALL) },
      },
    },
    async (request) => service.read(request.params.evidenceChainId, agentKey(request.headers.authorization), deps.clock.now()),
  );

  app.get(
    '/api/evidence-chains/:evidenceChainId/summary',
    {
      schema: {
        tags,
        security,
        operationId: 'getEvidenceChainSummary',
        summary: 'Summary of a chain: pre-authorization, preflight, settlement and reconciliation state',
        description: 'reconciliation is NOT_SUBMITTED until settlement evidence exists. UNKNOWN is not verification; MATCH describes an observed transfer and is not permission to pay.',
        params: ChainParams,
        response: { 200: Summary, ...problems(...ALL) },
      },
    },
    async (request) => service.summary(request.params.evidenceChainId, agentKey(request.headers.authorization), deps.clock.now()),
  );

  app.post(
    '/api/evidence-chains/:evidenceChainId/preflight',
    {
      schema: {
        tags,
        security,
        operationId: 'attachEvidencePreflight',
        summary: 'Attach a transaction preflight of the unsigned transaction (agent key, pilot policy)',
        description:
          'Runs the transaction preflight on the unsigned input and appends TRANSACTION_PREFLIGHT_COMPLETED. The input has its own digest; the caller must verify that it represents the intended transaction (intentCheck compares a plain USDC transfer with the intent). Nothing is signed or executed. The same preflight again answers the recorded one (replayed true); a different one is 409. 503 when direct pilot checks are not enabled for the policy, or the chain cannot be read (an RPC that does not say it serves Base, eth_chainId 8453, counts as unreadable).',
        params: ChainParams,
        body: PreflightRequest,
        response: { 200: PreflightResponse, ...problems(...ALL, ...BODY, 409) },
      },
    },
    async (request) => {
      // Checked as the paid preflight checks it, before anything is read or recorded.
      checkPreflightRequest(request.body);
      return checks.preflight(request.params.evidenceChainId, request.body, agentKey(request.headers.authorization), deps.clock.now());
    },
  );

  app.post(
    '/api/evidence-chains/:evidenceChainId/settlement',
    {
      schema: {
        tags,
        security,
        operationId: 'reconcileEvidenceSettlement',
        summary: 'Reconcile a settlement transaction against the immutable intent (agent key, pilot policy)',
        description: `Reads the transaction's USDC Transfer logs and appends SETTLEMENT_RECONCILED: MATCH (one transfer pays the recipient exactly the amount, from expectedFrom when given, with at least ${deps.config.minConfirmations} confirmation(s)), MISMATCH (a USDC transfer differs; mismatches names the intent fields), PENDING (not mined or too few confirmations), FAILED (reverted), UNKNOWN (not found, or Base could not be read). The same txHash after a final result (MATCH, MISMATCH, FAILED) answers the stored evidence with replayed true; PENDING and UNKNOWN may be reconciled again, with the same or another txHash, and so may another txHash after a MISMATCH or FAILED (its transaction did not pay the intent; the next may). Another txHash after a MATCH, or a conflicting submission recorded concurrently, is 409: read the chain. One payment settles one intent within a policy: a transfer already reconciled as MATCH by another chain of the same policy gives MISMATCH, naming that chain, unless another transfer of the same transaction pays that chain too (it then moves there, and both MATCH, whichever was reconciled first). Chains of other policies do not count: a transfer is public, so another tenant's chain naming it is that tenant's own record and never blocks this one.`,
        params: ChainParams,
        body: SettlementRequest,
        response: { 200: SettlementResponse, ...problems(...ALL, ...BODY, 409) },
      },
    },
    async (request) =>
      checks.settlement(request.params.evidenceChainId, request.body.txHash, agentKey(request.headers.authorization), deps.clock.now()),
  );
};
