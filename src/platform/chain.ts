import { BaseError, createPublicClient, fallback, http, HttpRequestError, TimeoutError, type PublicClient, type Transport } from 'viem';
import { base } from 'viem/chains';
import type { Config } from '../config.js';
import { boundedFetch } from './bounded-fetch.js';
import { AppError } from './errors.js';

/**
 * The service's read-only view of Base. viem's own `base` definition keeps the OP-stack
 * formatters (deposit transactions, L1 fee fields in receipts); the RPC URLs come from
 * configuration, so the same client reads mainnet or the local devnet.
 */
export type ChainClient = PublicClient<Transport, typeof base>;

/**
 * The gas price of every simulated call (token-risk trades, the transaction preflight): 0.01
 * gwei, a usual Base fee. A node simulates at gas price 0 unless told otherwise, and a contract
 * can tell: `if (tx.gasprice > 0) revert()` on sells, say, is a honeypot that every zero-fee
 * simulation lets through.
 */
export const SIMULATED_GAS_PRICE = 10_000_000n;

/**
 * Longest JSON-RPC answer read. The largest the service asks for is the preflight's eth_getLogs
 * of one sender's USDC transfers over 10,000 blocks (about 700 bytes a log); a longer answer is
 * a transport failure, as viem reports any other (see boundedFetch).
 */
export const MAX_RPC_BODY_BYTES = 8 * 1024 * 1024;
const readRpcAnswer = boundedFetch(MAX_RPC_BODY_BYTES);

export function createChainClient(config: Pick<Config, 'rpcUrls' | 'rpcTimeoutMs'>, opts: { anyChain?: boolean } = {}): ChainClient {
  if (config.rpcUrls.length === 0) throw new Error('createChainClient: at least one RPC URL is required');
  // anyChain: no URL is asked for its chain first (the quick check, whose report is that chain id).
  const transports = config.rpcUrls.map((url) => {
    const transport = http(url, { timeout: config.rpcTimeoutMs, retryCount: 1, fetchFn: readRpcAnswer });
    return opts.anyChain ? transport : servingBase(transport);
  });
  return createPublicClient({
    chain: base,
    // rank:false keeps the operator's order (the first URL is the preferred provider). The
    // fallback itself does not retry: each URL already retries once, and repeating the whole
    // list would multiply the worst-case wait of a paid request (urls x 2 x timeout).
    transport: fallback(transports, { rank: false, retryCount: 0 }),
  });
}

/** An RPC URL that answered eth_chainId with another chain than Base. */
export class WrongChainError extends BaseError {
  constructor(chainId: number) {
    super(`the RPC serves chain id ${chainId}, not Base (${base.id})`, { name: 'WrongChainError' });
  }
}

/**
 * Each RPC URL is asked for its chain id along with its first read, whose answer is used only
 * once the chain id is Base; then not again until the URL fails. viem's fallback moves to the
 * next URL when one fails, and a check made once per client would only vouch for the first: with
 * a testnet URL second in BASE_RPC_URLS, a transfer on that testnet was recorded as a final MATCH
 * once the first URL timed out. A URL on another chain fails its reads (the fallback goes on to
 * the next, or the read is a 502).
 */
function servingBase(inner: Transport): Transport {
  // Kept for the URL, not per transport: viem's fallback builds a URL's transport afresh for
  // every request, so a check kept there was made again before every read.
  let verified: Promise<void> | undefined;
  return (params) => {
    const t = inner(params);
    // A failed check (no answer, or another chain) is not kept: the next read asks again.
    const verify = () =>
      (verified ??= (t.request({ method: 'eth_chainId' }) as Promise<string>)
        .then((id) => {
          if (Number(id) !== base.id) throw new WrongChainError(Number(id));
        })
        .catch((err: unknown) => {
          verified = undefined;
          throw err;
        }));
    return {
      ...t,
      async request(args, options) {
        if (args.method === 'eth_chainId') return t.request(args, options);
        try {
          // Sent alongside the check (no extra round trip), the answer used only once it passed.
          const [, answer] = await Promise.all([verify(), t.request(args, options)]);
          return answer;
        } catch (err) {
          // Not an answer of the node (a timeout, a refused connection, an HTTP error): whatever
          // serves this URL next is asked for its chain again.
          if (err instanceof HttpRequestError || err instanceof TimeoutError) verified = undefined;
          throw err;
        }
      },
    } as ReturnType<Transport>;
  };
}

/** The only text a caller sees when Base cannot be read: never the URL (it may hold an API key) nor the node's words. */
export const UPSTREAM_DETAIL = 'The Base network could not be read; nothing was checked. Try again later.';

// viem puts the request URL (path and query included) into its messages; keys live there.
const URL_RE = /\bhttps?:\/\/[^\s"'<>]+/gi;
const redactUrls = (s: string) => s.replace(URL_RE, '<rpc-url>');

/**
 * Runs chain reads and turns a failure into a 502 AppError: a viem failure (transport error,
 * timeout, JSON-RPC error), and an answer that could not be read. viem formats answers with
 * plain BigInt and hex conversions, and `fn` decodes what it was given: a malformed answer
 * (`"banana"` for a block number, `null` for a receipt's logs) throws a SyntaxError or a
 * TypeError, which is the node's fault, not the caller's (no 400) and not a crash (no 500).
 * An AppError thrown inside is passed on as it is. The `cause` keeps a short message for the
 * logs, with URLs redacted.
 */
export async function upstream<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof AppError) throw e;
    const err = new AppError('upstream_unavailable', UPSTREAM_DETAIL);
    const cause =
      e instanceof BaseError
        ? Object.assign(new Error(redactUrls(`${e.name}: ${e.shortMessage}${e.details ? ` (${e.details})` : ''}`)), { name: 'RpcFailure' })
        : Object.assign(new Error(redactUrls(`${(e as Error)?.name ?? 'Error'}: ${String((e as Error)?.message ?? e)}`).slice(0, 200)), { name: 'RpcAnswerUnreadable' });
    err.cause = cause;
    throw err;
  }
}

const checkedChains = new WeakMap<ChainClient, Promise<void>>();

/**
 * Resolves once the client's RPC has said it serves Base (eth_chainId 8453); a success is kept per
 * client, a failure is asked again next time. Every read the service gives a verdict on (payment
 * evidence, the token-risk report, the transaction preflight, the free token tools) refuses
 * another chain: an RPC URL of a testnet or a fork, set by mistake, would otherwise vouch for a
 * payment Base never saw or ALLOW a token or a transaction on a chain that is not Base. It is a
 * 502 like any unreadable Base. The quick check reads the id itself instead: to report a wrong
 * chain is its purpose. `asked` is called when this call sends the eth_chainId request (the first
 * on a client), so that a caller counting its requests counts that one too.
 */
export function onBase(chain: ChainClient, asked?: () => void): Promise<void> {
  let check = checkedChains.get(chain);
  if (!check) {
    asked?.();
    check = upstream(() => chain.getChainId()).then((id) => {
      if (id === base.id) return;
      const err = new AppError('upstream_unavailable', UPSTREAM_DETAIL);
      err.cause = Object.assign(new Error(`the RPC serves chain id ${id}, not Base (${base.id})`), { name: 'WrongChain' });
      throw err;
    });
    checkedChains.set(chain, check);
    check.catch(() => checkedChains.delete(chain));
  }
  return check;
}

/**
 * `read` sent together with the Base check (no extra round), its result given only once the RPC
 * has said it serves Base; viem failures of either are the 502 of `upstream`.
 */
export async function readOnBase<T>(chain: ChainClient, read: () => Promise<T>, asked?: () => void): Promise<T> {
  const [, value] = await upstream(() => Promise.all([onBase(chain, asked), read()]));
  return value;
}

/**
 * The blocks from `from` to `to` (inclusive) as consecutive ranges of at most `size` blocks: the
 * eth_getLogs requests of a provider that refuses wider ones (RPC_LOG_BLOCK_RANGE). Made one at
 * a time, as they are read: `to` is the node's word and may be absurdly far.
 */
export function* blockRanges(from: bigint, to: bigint, size: bigint): Generator<[bigint, bigint]> {
  for (let at = from; at <= to; at += size) yield [at, at + size - 1n < to ? at + size - 1n : to];
}
