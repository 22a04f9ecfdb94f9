// Self-hosted x402 v2 facilitator for the devnet: the real @x402/evm "exact" scheme
// settling real EIP-3009 transfers on the local chain, behind the same HTTP surface
// that @x402/core's HTTPFacilitatorClient talks to (POST /verify, POST /settle,
// GET /supported), plus runtime fault injection for resilience tests.
import Fastify from 'fastify';
import { createWalletClient, http, publicActions, type Address, type Hex } from 'viem';
import { createNonceManager, jsonRpc } from 'viem/nonce';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Facilitator } from '@x402/core/facilitator';
import type { PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse } from '@x402/core/types';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import { baseDevnetChain } from './chain.js';

export const BASE_NETWORK = 'eip155:8453' as const;
/** Reason code returned by injected failures, so tests can tell them from real ones. */
export const FAULT_REASON = 'devnet_fault_injected';

export interface FacilitatorFaults {
  /** Delay before answering /verify and /settle (not /supported, so clients can still start). */
  delayMs?: number;
  /** /verify answers `{ isValid: false, invalidReason: FAULT_REASON }` without checking anything. */
  failVerify?: boolean;
  /** /settle answers `{ success: false, errorReason: FAULT_REASON }` without touching the chain. */
  failSettle?: boolean;
  /**
   * HTTP status for injected failures (default 200, as a facilitator reports a rejected
   * payment). Use e.g. 500 to model an unhealthy facilitator; HTTPFacilitatorClient then
   * throws VerifyError/SettleError instead of returning the body.
   */
  failStatus?: number;
}

export interface StartFacilitatorOptions {
  rpcUrl: string;
  /** Key that pays gas for settlements; must hold ETH on the devnet. */
  privateKey: Hex;
  faults?: FacilitatorFaults;
  /** Bound on waiting for a settlement receipt. Default 10 s (anvil mines instantly). */
  confirmationTimeoutMs?: number;
}

export interface FacilitatorCallCounts {
  verify: number;
  settle: number;
  supported: number;
}

export interface FacilitatorHandle {
  url: string;
  /** Address that submits settlement transactions. */
  signerAddress: Address;
  /** Replaces the active faults (pass `{}` to clear). Takes effect on the next request. */
  setFaults(faults: FacilitatorFaults): void;
  getFaults(): FacilitatorFaults;
  /** Requests received per endpoint, counted before faults apply. */
  calls: FacilitatorCallCounts;
  stop(): Promise<void>;
}

interface FacilitatorRequestBody {
  x402Version?: number;
  paymentPayload?: PaymentPayload;
  paymentRequirements?: PaymentRequirements;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startFacilitator(opts: StartFacilitatorOptions): Promise<FacilitatorHandle> {
  // A nonce manager matters: concurrent /settle calls would otherwise read the same
  // pending nonce and one settlement would be rejected. It must be per instance, not
  // viem's global one: that remembers the last nonce per (address, chain id), and every
  // devnet is chain 8453 with the same signer, so a second devnet in the same process
  // would get a nonce gap and its settlements would hang in the mempool.
  const account = privateKeyToAccount(opts.privateKey, { nonceManager: createNonceManager({ source: jsonRpc() }) });
  const client = createWalletClient({ account, chain: baseDevnetChain(opts.rpcUrl), transport: http(opts.rpcUrl) }).extend(
    publicActions,
  );
  const signer = toFacilitatorEvmSigner(
    {
      address: account.address,
      readContract: (args) => client.readContract(args as Parameters<typeof client.readContract>[0]),
      verifyTypedData: (args) => client.verifyTypedData(args as Parameters<typeof client.verifyTypedData>[0]),
      writeContract: (args) => client.writeContract(args as Parameters<typeof client.writeContract>[0]),
      sendTransaction: (args) => client.sendTransaction(args),
      waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args),
      getCode: (args) => client.getCode(args),
    },
    { confirmationTimeoutMs: opts.confirmationTimeoutMs ?? 10_000 },
  );
  // Register only v2 on Base; registerExactEvmScheme would also add every v1 network name.
  const facilitator = new x402Facilitator().register(BASE_NETWORK, new ExactEvmScheme(signer));

  let faults: FacilitatorFaults = { ...opts.faults };
  const calls: FacilitatorCallCounts = { verify: 0, settle: 0, supported: 0 };
  // Clients (undici) pool keep-alive sockets. After a client-aborted request, close()
  // was observed to hang for Fastify's 72 s keepAliveTimeout; stop() must be prompt.
  const app = Fastify({ logger: false, forceCloseConnections: true });

  const parse = (body: unknown): { payload: PaymentPayload; requirements: PaymentRequirements } | undefined => {
    const b = (body ?? {}) as FacilitatorRequestBody;
    if (!b.paymentPayload || !b.paymentRequirements) return undefined;
    return { payload: b.paymentPayload, requirements: b.paymentRequirements };
  };
  const payerOf = (p: PaymentPayload): string | undefined => {
    const auth = (p.payload as { authorization?: { from?: string } }).authorization;
    return auth?.from;
  };

  app.get('/supported', async () => {
    calls.supported++;
    return facilitator.getSupported();
  });

  app.post('/verify', async (req, reply) => {
    calls.verify++;
    const f = faults;
    if (f.delayMs) await sleep(f.delayMs);
    const parsed = parse(req.body);
    if (!parsed) return reply.code(400).send({ error: 'body must contain paymentPayload and paymentRequirements' });
    if (f.failVerify) {
      const body: VerifyResponse = {
        isValid: false,
        invalidReason: FAULT_REASON,
        invalidMessage: 'verify failure injected by devnet facilitator',
        payer: payerOf(parsed.payload),
      };
      return reply.code(f.failStatus ?? 200).send(body);
    }
    try {
      return await facilitator.verify(parsed.payload, parsed.requirements);
    } catch (e) {
      // Thrown (not isValid:false) means the request itself was unusable, e.g. unknown scheme.
      return reply.code(500).send({ error: e instanceof Error ? e.message : String(e) });
    }
  });

  app.post('/settle', async (req, reply) => {
    calls.settle++;
    const f = faults;
    if (f.delayMs) await sleep(f.delayMs);
    const parsed = parse(req.body);
    if (!parsed) return reply.code(400).send({ error: 'body must contain paymentPayload and paymentRequirements' });
    if (f.failSettle) {
      const body: SettleResponse = {
        success: false,
        errorReason: FAULT_REASON,
        errorMessage: 'settle failure injected by devnet facilitator',
        payer: payerOf(parsed.payload),
        transaction: '',
        network: parsed.requirements.network,
      };
      return reply.code(f.failStatus ?? 200).send(body);
    }
    try {
      return await facilitator.settle(parsed.payload, parsed.requirements);
    } catch (e) {
      return reply.code(500).send({ error: e instanceof Error ? e.message : String(e) });
    }
  });

  // Port 0 lets the kernel pick; unlike anvil, Fastify reports the bound port back.
  const address = await app.listen({ host: '127.0.0.1', port: 0 });

  return {
    url: address,
    signerAddress: account.address,
    setFaults: (next) => {
      faults = { ...next };
    },
    getFaults: () => ({ ...faults }),
    calls,
    stop: async () => {
      await app.close();
    },
  };
}
