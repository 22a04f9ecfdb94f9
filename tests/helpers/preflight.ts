import { createPublicClient, http } from 'viem';
import { base } from 'viem/chains';
import type { ChainClient } from '../../src/platform/chain.js';

export interface CountingChain {
  chain: ChainClient;
  /** JSON-RPC methods in the order the HTTP requests left (one entry per HTTP round trip). */
  methods: string[];
  /** Methods the fake node answers with "method not found" (-32601), as a node without them would. */
  deny: Set<string>;
  reset(): void;
}

/**
 * A ChainClient configured as createChainClient configures it (viem's base chain, one retry),
 * whose fetch records every HTTP request (viem's onFetchRequest sees the same) and can refuse
 * chosen methods, so that a test can count round trips and exercise the fallback paths
 * against the real devnet.
 */
export function countingChain(rpcUrl: string, deny: string[] = []): CountingChain {
  const methods: string[] = [];
  const denied = new Set(deny);
  const fetchFn = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const body = JSON.parse(String(init?.body ?? '{}')) as { id: number; method: string } | { id: number; method: string }[];
    const one = Array.isArray(body) ? body[0]! : body;
    methods.push(Array.isArray(body) ? `batch:${body.map((b) => b.method).join(',')}` : one.method);
    if (!Array.isArray(body) && denied.has(one.method)) {
      const error = { code: -32601, message: `the method ${one.method} does not exist/is not available` };
      return new Response(JSON.stringify({ jsonrpc: '2.0', id: one.id, error }), { status: 200, headers: { 'content-type': 'application/json' } });
    }
    return fetch(input, init);
  };
  const chain = createPublicClient({ chain: base, transport: http(rpcUrl, { retryCount: 1, timeout: 10_000, fetchFn }) });
  return { chain: chain as ChainClient, methods, deny: denied, reset: () => void methods.splice(0) };
}
