import { BaseError, HttpRequestError, RpcRequestError } from 'viem';
import type { ChainClient } from '../../platform/chain.js';

/**
 * Every JSON-RPC request of a preflight goes through `rpc`, so the number of requests per
 * report is counted in one place (bench/preflight.ts reads the counter; the budget is 4). The
 * one exception, the eth_chainId a client's first report sends (onBase), is counted here too.
 */
export const preflightRpcCounter = { requests: 0 };

type RawRequest = (args: { method: string; params: unknown[] }) => Promise<unknown>;

export async function rpc<T>(chain: ChainClient, method: string, params: unknown[]): Promise<T> {
  preflightRpcCounter.requests++;
  return (await (chain.request as unknown as RawRequest)({ method, params })) as T;
}

/**
 * HTTP statuses of the provider in front of the node, not of the node: a refused or expired key
 * or a spent quota (401, 403, 407), a timeout (408), too many requests (429). The node was not
 * asked, so nothing may be concluded (and recorded) about the transaction from them.
 */
const NOT_AN_ANSWER: ReadonlySet<number> = new Set([401, 403, 407, 408, 429]);

/**
 * The node answered, with a JSON-RPC error (or an HTTP 4xx that providers use for "method not
 * allowed"): the method, its parameters or the transaction are the problem, not reachability.
 * Anything else (timeout, refused connection, 5xx, NOT_AN_ANSWER) is a transport failure and the caller
 * lets it become a 502, so nothing is charged for a report the chain could not be asked for.
 */
export function answeredError(e: unknown): { code: number | null; message: string; data: unknown } | null {
  if (!(e instanceof BaseError)) return null;
  const rpcErr = e.walk((c) => c instanceof RpcRequestError) as RpcRequestError | null;
  if (rpcErr && (rpcErr.status === undefined || (rpcErr.status < 500 && !NOT_AN_ANSWER.has(rpcErr.status)))) {
    return { code: rpcErr.code, message: `${rpcErr.details ?? ''}`, data: rpcErr.data };
  }
  const http = e.walk((c) => c instanceof HttpRequestError) as HttpRequestError | null;
  if (http?.status && http.status >= 400 && http.status < 500 && !NOT_AN_ANSWER.has(http.status)) {
    return { code: null, message: http.details ?? '', data: undefined };
  }
  return null;
}

/** Resolves to the answered error instead of throwing it; transport failures still throw. */
export async function attempt<T>(p: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: NonNullable<ReturnType<typeof answeredError>> }> {
  try {
    return { ok: true, value: await p };
  } catch (e) {
    const answered = answeredError(e);
    if (!answered) throw e;
    return { ok: false, error: answered };
  }
}

/** A method the node does not serve at all (as opposed to a request it rejected). */
export function methodMissing(error: { code: number | null; message: string }): boolean {
  return error.code === -32601 || error.code === -32004 || error.code === null || /not (found|supported|available|exist)|unsupported|unknown method|does not exist/i.test(error.message);
}

/**
 * For reads the report can do without (the call trace, the poisoning check, token metadata):
 * any failure, even a timeout, degrades that part of the report instead of failing it.
 */
export async function optional<T>(p: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: { code: number | null; message: string; data: unknown } }> {
  try {
    return { ok: true, value: await p };
  } catch (e) {
    return { ok: false, error: answeredError(e) ?? { code: null, message: 'transport failure', data: undefined } };
  }
}
