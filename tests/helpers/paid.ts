import { decodePaymentSignatureHeader } from '@x402/core/http';
import { x402Client, x402HTTPClient, wrapFetchWithPayment } from '@x402/fetch';
import { sql, type KyselyPlugin, type PluginTransformQueryArgs, type PluginTransformResultArgs, type QueryResult, type RootOperationNode, type UnknownRow } from 'kysely';
import { toClientEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { createPublicClient, http, parseAbi, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { Config } from '../../src/config.js';
import { baseDevnetChain, startDevnet, USDC_ADDRESS, type Devnet } from '../../src/devnet/index.js';
import { createTestApp, type TestApp, type TestAppOptions } from './app.js';
import type { TestDatabase } from './db.js';
import { jsonRpc } from './http.js';

export interface PaidStack {
  devnet: Devnet;
  t: TestApp;
  /** http://127.0.0.1:port of the listening service */
  url: string;
  payTo: Hex;
  balanceOf(address: string): Promise<bigint>;
  /** fetch that pays with the official x402 client, from devnet account `index` */
  payingFetch(index: number): typeof fetch;
  close(): Promise<void>;
}

/** The service listening on loopback, paid through the devnet's facilitator into account 5. */
export async function startPaidStack(opts: TestAppOptions & { devnet?: Devnet } = {}): Promise<PaidStack> {
  const devnet = opts.devnet ?? (await startDevnet());
  const payTo = devnet.accounts[5]!.address as Hex;
  const config: Partial<Config> = {
    rpcUrls: [devnet.rpcUrl],
    facilitatorUrl: devnet.facilitatorUrl,
    payTo,
    facilitatorTimeoutMs: 3000,
    ...opts.config,
  };
  const t = await createTestApp({ ...opts, config });
  const url = await t.app.listen({ host: '127.0.0.1', port: 0 });
  const pub = createPublicClient({ chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  const erc20 = parseAbi(['function balanceOf(address) view returns (uint256)']);
  return {
    devnet,
    t,
    url,
    payTo,
    balanceOf: (address) => pub.readContract({ address: USDC_ADDRESS, abi: erc20, functionName: 'balanceOf', args: [address as Hex] }),
    payingFetch(index) {
      const account = privateKeyToAccount(devnet.accounts[index]!.privateKey);
      const client = new x402Client().register('eip155:8453', new ExactEvmScheme(toClientEvmSigner(account, pub)));
      return wrapFetchWithPayment(fetch, client);
    },
    async close() {
      await t.close();
      if (!opts.devnet) await devnet.stop();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Fault-injection helpers for the payment-guarantee tests (tests/paid/*).

/** The official client from devnet account `index`, recording every PAYMENT-SIGNATURE it sends. */
export function recordingPayingFetch(stack: PaidStack, index: number): { fetch: typeof fetch; signatures: string[]; client: x402Client } {
  const pub = createPublicClient({ chain: baseDevnetChain(stack.devnet.rpcUrl), transport: http(stack.devnet.rpcUrl) });
  const account = privateKeyToAccount(stack.devnet.accounts[index]!.privateKey);
  const client = new x402Client().register('eip155:8453', new ExactEvmScheme(toClientEvmSigner(account, pub)));
  const signatures: string[] = [];
  const recording = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = new Request(input, init);
    const sig = request.headers.get('payment-signature');
    if (sig) signatures.push(sig);
    return fetch(request);
  }) as typeof fetch;
  return { fetch: wrapFetchWithPayment(recording, client), signatures, client };
}

/**
 * A PAYMENT-SIGNATURE built with the official client (x402HTTPClient) against the 402 challenge
 * of `url`, without sending it: the caller decides how often and how concurrently to send it.
 */
export async function signPayment(stack: PaidStack, index: number, url: string, init?: RequestInit): Promise<string> {
  const { client } = recordingPayingFetch(stack, index);
  const httpClient = new x402HTTPClient(client);
  const challenge = await fetch(url, init);
  if (challenge.status !== 402) throw new Error(`expected a 402 challenge from ${url}, got ${challenge.status}`);
  const text = await challenge.text();
  const required = httpClient.getPaymentRequiredResponse((n) => challenge.headers.get(n), text ? JSON.parse(text) : undefined);
  const payload = await client.createPaymentPayload(required);
  const headers = httpClient.encodePaymentSignatureHeader(payload);
  const sig = headers['PAYMENT-SIGNATURE'];
  if (!sig) throw new Error('the official client produced no PAYMENT-SIGNATURE');
  return sig;
}

/** The name of the table a Kysely query node writes to or reads from (first one), if any. */
export function tableOf(node: RootOperationNode): string | undefined {
  const n = node as { into?: unknown; table?: unknown; from?: { froms?: unknown[] } };
  const target = (n.into ?? n.table ?? n.from?.froms?.[0]) as { kind?: string; table?: { identifier?: { name?: string } }; node?: unknown } | undefined;
  const table = (target?.kind === 'AliasNode' ? target.node : target) as { table?: { identifier?: { name?: string } } } | undefined;
  return table?.table?.identifier?.name;
}

/** The value an UPDATE sets `column` to, when it sets it to a plain value. */
export function updatedValue(node: RootOperationNode, column: string): unknown {
  if (node.kind !== 'UpdateQueryNode') return undefined;
  for (const u of node.updates ?? []) {
    const col = (u.column as { column?: { name?: string } }).column?.name;
    const value = u.value as unknown as { kind?: string; value?: unknown };
    if (col === column) return value.kind === 'ValueNode' ? value.value : '<expression>';
  }
  return undefined;
}

export type QueryRule = (node: RootOperationNode) => boolean;

export const INJECTED_DB_FAULT = 'injected database fault';

/** Rules for FaultyDatabase.fail. */
export const dbFaults = {
  everything: (() => true) as QueryRule,
  insertInto: (table: string): QueryRule => (node) => node.kind === 'InsertQueryNode' && tableOf(node) === table,
  /** An UPDATE of `table` setting `status` (to `value`, when given). */
  statusUpdate: (table: string, value?: string): QueryRule => (node) => {
    if (node.kind !== 'UpdateQueryNode' || tableOf(node) !== table) return false;
    const v = updatedValue(node, 'status');
    return v !== undefined && (value === undefined || v === value);
  },
};

export interface FaultyDatabase extends TestDatabase {
  /** Makes every query matching `rule` throw before it reaches the database (null: heal). */
  fail(rule: QueryRule | null): void;
  /** Queries that were refused so far. */
  refused: number;
}

/**
 * The same database seen through a Kysely plugin that refuses chosen queries before they run, so a
 * second service instance on it can meet an unreachable database, a failing insert or a lost
 * status update, while the healthy instance (and the test) still read the truth.
 */
export function faultyDatabase(base: TestDatabase): FaultyDatabase {
  let rule: QueryRule | null = null;
  const faulty: FaultyDatabase = {
    ...base,
    refused: 0,
    fail(next) {
      rule = next;
    },
    ping: async () => {
      await sql`select 1`.execute(db);
    },
    // The base database belongs to whoever created it; this view never closes or drops it.
    close: async () => {},
    drop: async () => {},
  };
  const plugin: KyselyPlugin = {
    transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
      if (rule?.(args.node)) {
        faulty.refused++;
        throw new Error(INJECTED_DB_FAULT);
      }
      return args.node;
    },
    transformResult: async (args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> => args.result,
  };
  const db = base.db.withPlugin(plugin);
  faulty.db = db;
  return faulty;
}

/** The paid_reports row a PAYMENT-SIGNATURE bought, if any (rows are keyed by payer:nonce). */
export function paidRowOf(stack: PaidStack, signature: string) {
  const auth = (decodePaymentSignatureHeader(signature).payload as { authorization: { from: string; nonce: string } }).authorization;
  return stack.t.database.db.selectFrom('paid_reports').selectAll().where('auth_id', '=', `${auth.from.toLowerCase()}:${auth.nonce.toLowerCase()}`).executeTakeFirst();
}

/** POSTs `body` as JSON to `url`. */
export const postJson = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

/** POST /api/orders/recover on `stack` for the order of a 202 answer, naming `txHash` when given. */
export async function recoverOrder(stack: PaidStack, order: { orderId: string; recoveryKey: string }, txHash?: string) {
  const res = await postJson(`${stack.url}/api/orders/recover`, { id: order.orderId, key: order.recoveryKey, ...(txHash ? { txHash } : {}) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A fetch Response in the shape tests/helpers/problems.ts expects (inject-like). */
export async function asInjected(res: Response): Promise<{ statusCode: number; headers: Record<string, string>; body: string }> {
  return { statusCode: res.status, headers: Object.fromEntries(res.headers), body: await res.text() };
}

/** Resolves once `check` returns true, polling every `everyMs` (fails after `timeoutMs`). */
export async function eventually(check: () => Promise<boolean>, what: string, timeoutMs = 20_000, everyMs = 100): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export interface ProxiedRequest {
  method: string;
  url: string;
  body: string;
  /** The Authorization header the service sent, if any (not forwarded) */
  authorization?: string;
}
export interface ProxiedResponse {
  status: number;
  headers?: Record<string, string>;
  body: string;
}
/** What a proxy rule does with one request: answer it (perhaps after forwarding it), or drop the connection. */
export type ProxyRule = (req: ProxiedRequest, forward: () => Promise<ProxiedResponse>) => Promise<ProxiedResponse | 'drop'>;

/**
 * A loopback HTTP proxy in front of `target` (the devnet facilitator or RPC) whose `rule` may
 * forward, rewrite, delay or drop each request: faults between the service and its upstreams.
 */
export async function startHttpProxy(target: string, initial?: ProxyRule): Promise<{ url: string; setRule(rule: ProxyRule | null): void; close(): Promise<void> }> {
  const { createServer } = await import('node:http');
  let rule: ProxyRule | null = initial ?? null;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const request: ProxiedRequest = {
        method: req.method ?? 'GET',
        url: req.url ?? '/',
        body: Buffer.concat(chunks).toString('utf8'),
        ...(req.headers.authorization === undefined ? {} : { authorization: req.headers.authorization }),
      };
      const forward = async (): Promise<ProxiedResponse> => {
        const up = await fetch(`${target.replace(/\/+$/, '')}${request.url}`, {
          method: request.method,
          headers: { 'content-type': String(req.headers['content-type'] ?? 'application/json') },
          ...(request.method === 'GET' || request.method === 'HEAD' ? {} : { body: request.body }),
        });
        return { status: up.status, headers: { 'content-type': up.headers.get('content-type') ?? 'application/json' }, body: await up.text() };
      };
      (rule ? rule(request, forward) : forward()).then(
        (out) => {
          if (out === 'drop') {
            req.socket.destroy();
            return;
          }
          res.writeHead(out.status, out.headers ?? { 'content-type': 'application/json' }).end(out.body);
        },
        () => req.socket.destroy(),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}`,
    setRule: (next) => {
      rule = next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A paid stack whose facilitator holds every settle: the service is told
 * `invalid_exact_evm_transaction_failed` (an uncertain outcome), and the test releases each held
 * settle to the real facilitator when it wants the transfer to land (`held[i]()`).
 */
export async function startHoldingStack(base: PaidStack, config: Partial<Config> = {}, clock?: TestAppOptions['clock']) {
  const held: Array<() => Promise<ProxiedResponse>> = [];
  const proxy = await startHttpProxy(base.devnet.facilitatorUrl, async (req, forward) => {
    if (req.url !== '/settle') return forward();
    held.push(forward);
    return { status: 200, body: JSON.stringify({ success: false, errorReason: 'invalid_exact_evm_transaction_failed', transaction: '', network: 'eip155:8453' }) };
  });
  const stack = await startPaidStack({ devnet: base.devnet, database: base.t.database, ...(clock ? { clock } : {}), config: { facilitatorUrl: proxy.url, ...config } });
  return {
    stack,
    held,
    async close() {
      await stack.close();
      await proxy.close();
    },
  };
}

/** A JSON-RPC call to the devnet's node (anvil_mine, evm_increaseTime, …). */
export const devnetRpc = (devnet: Devnet, method: string, params: unknown[]) => jsonRpc(devnet.rpcUrl, method, params);
