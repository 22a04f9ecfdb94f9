import { createPublicClient, http } from 'viem';
import { base } from 'viem/chains';
import type { ChainClient } from '../../src/platform/chain.js';
import { jsonRpc } from './http.js';

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
export function countingChain(rpcUrl: string, deny: string[] = [], opts: { maxLogSpan?: bigint; mineBeforeLogs?: boolean } = {}): CountingChain {
  const methods: string[] = [];
  const denied = new Set(deny);
  const refuse = (id: number, code: number, message: string) =>
    new Response(JSON.stringify({ jsonrpc: '2.0', id, error: { code, message } }), { status: 200, headers: { 'content-type': 'application/json' } });
  const fetchFn = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const body = JSON.parse(String(init?.body ?? '{}')) as { id: number; method: string; params?: unknown[] } | { id: number; method: string }[];
    const one = Array.isArray(body) ? body[0]! : body;
    methods.push(Array.isArray(body) ? `batch:${body.map((b) => b.method).join(',')}` : one.method);
    if (!Array.isArray(body) && denied.has(one.method)) return refuse(one.id, -32601, `the method ${one.method} does not exist/is not available`);
    // As a hosted provider does: an eth_getLogs over more than maxLogSpan blocks is refused.
    // Base makes a block every 2 s: one may land between a report's reads.
    if (!Array.isArray(body) && one.method === 'eth_getLogs' && opts.mineBeforeLogs) await jsonRpc(rpcUrl, 'anvil_mine', ['0x1']);
    if (!Array.isArray(body) && one.method === 'eth_getLogs' && opts.maxLogSpan !== undefined) {
      const [filter] = body.params as [{ fromBlock: string; toBlock: string }];
      const to = filter.toBlock === 'latest' ? await blockNumberOf(rpcUrl) : BigInt(filter.toBlock);
      if (to - BigInt(filter.fromBlock) + 1n > opts.maxLogSpan) return refuse(one.id, -32602, `query exceeds max block range ${opts.maxLogSpan}`);
    }
    return fetch(input, init);
  };
  const chain = createPublicClient({ chain: base, transport: http(rpcUrl, { retryCount: 1, timeout: 10_000, fetchFn }) });
  return { chain: chain as ChainClient, methods, deny: denied, reset: () => void methods.splice(0) };
}

/** The node's latest block number (the fake provider's own read: not counted). */
const blockNumberOf = async (rpcUrl: string): Promise<bigint> => BigInt((await jsonRpc(rpcUrl, 'eth_blockNumber', [])).result as string);

/** Mines empty blocks until the node's latest block is at least `block`; returns the latest. */
export async function mineTo(rpcUrl: string, block: bigint): Promise<bigint> {
  const latest = await blockNumberOf(rpcUrl);
  if (latest < block) await jsonRpc(rpcUrl, 'anvil_mine', [`0x${(block - latest).toString(16)}`]);
  return blockNumberOf(rpcUrl);
}
