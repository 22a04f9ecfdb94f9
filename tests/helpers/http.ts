/** A real HTTP request; its body parsed as JSON when it is JSON, else the text as it came. */
export async function fetchBody(url: string, init?: RequestInit): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, init);
  const text = await res.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, body, headers: res.headers };
}

/** One JSON-RPC call over HTTP (a devnet node's anvil_mine, eth_blockNumber, …): the whole answer. */
export async function jsonRpc(url: string, method: string, params: unknown[]): Promise<{ result?: unknown; error?: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) });
  return (await res.json()) as { result?: unknown; error?: unknown };
}
