import { createPublicClient, fallback, http } from 'viem';
import { base } from 'viem/chains';
import type { ChainClient } from '../../src/platform/chain.js';

/** RPC requests a report made, and in how many rounds (a round: requests in flight together). */
export interface RpcCounter {
  requests: number;
  rounds: number;
  inFlight: number;
}

/**
 * A Base client on `rpcUrl` that counts every JSON-RPC request into `counter` and delays each by
 * `latencyMs` (a remote provider's round trip). `unsupported` methods answer "method not found",
 * as on a node that lacks them.
 */
export function countingClient(rpcUrl: string, counter: RpcCounter, latencyMs: number, unsupported: readonly string[] = []): ChainClient {
  const fetchFn: typeof fetch = async (input, init) => {
    counter.requests += 1;
    if (counter.inFlight === 0) counter.rounds += 1;
    counter.inFlight += 1;
    try {
      if (latencyMs > 0) await new Promise((r) => setTimeout(r, latencyMs));
      const body = JSON.parse(String(init?.body)) as { id: number; method: string };
      if (unsupported.includes(body.method)) {
        return new Response(JSON.stringify({ jsonrpc: '2.0', id: body.id, error: { code: -32601, message: 'method not found' } }), { headers: { 'content-type': 'application/json' } });
      }
      return await fetch(input, init);
    } finally {
      counter.inFlight -= 1;
    }
  };
  return createPublicClient({ chain: base, transport: fallback([http(rpcUrl, { fetchFn, retryCount: 1 })], { rank: false, retryCount: 0 }) });
}
