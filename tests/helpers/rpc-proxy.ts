// A JSON-RPC proxy in front of a node (anvil) whose rule can rewrite any single call: a Base RPC that answers, but wrongly.
import { createServer, type Server } from 'node:http';
import { freePort } from '../../src/devnet/chain.js';

export interface RpcCall { jsonrpc: string; id: unknown; method: string; params: unknown[] }
/** Return undefined to forward; a string to send as the raw HTTP body (status 200); or an object {status, body, headers}, or {bytes}: a result of that many MiB. */
export type RpcRule = (call: RpcCall, forward: () => Promise<any>) => Promise<undefined | string | { status?: number; body?: string; headers?: Record<string, string>; bytes?: number }>;

export async function startRpcProxy(target: string) {
  let rule: RpcRule | null = null;
  const log: string[] = [];
  const fwd = async (body: unknown) => {
    const r = await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return r.json();
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      try {
        const parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        const calls: RpcCall[] = Array.isArray(parsed) ? parsed : [parsed];
        const outs: string[] = [];
        for (const call of calls) {
          log.push(call.method);
          const out = rule ? await rule(call, () => fwd(call)) : undefined;
          if (out === undefined) { outs.push(JSON.stringify(await fwd(call))); continue; }
          if (typeof out === 'string') { outs.push(out); continue; }
          if (out.bytes) {
            res.writeHead(200, { 'content-type': 'application/json' });
            const chunk = Buffer.alloc(1 << 20, 0x30);
            res.write('{"jsonrpc":"2.0","id":' + JSON.stringify(call.id) + ',"result":"0x');
            let n = 0;
            const pump = () => { while (n < out.bytes!) { n++; if (!res.write(chunk)) { res.once('drain', pump); return; } } res.end('"}'); };
            res.on('error', () => {});
            pump();
            return;
          }
          res.writeHead(out.status ?? 200, out.headers ?? { 'content-type': 'application/json' }).end(out.body ?? '');
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end(Array.isArray(parsed) ? `[${outs.join(',')}]` : outs[0]);
      } catch (e) {
        res.writeHead(500).end(String(e));
      }
    });
  });
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${port}`,
    log,
    setRule(r: RpcRule | null) { rule = r; },
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

/** A JSON-RPC answer with `result` for `call`. */
export const answer = (call: RpcCall, result: unknown) => JSON.stringify({ jsonrpc: '2.0', id: call.id, result });
