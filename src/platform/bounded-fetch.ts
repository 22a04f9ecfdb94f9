/** An answer longer than the caller reads: an upstream's garbage, not data. */
export class BodyTooLargeError extends Error {
  override name = 'BodyTooLargeError';
  constructor(readonly limit: number) {
    super(`the answer is longer than ${limit} bytes`);
  }
}

/**
 * `fetch` whose answer is read whole, up to `maxBytes`, before it is handed over. Market data and
 * Base RPC answers are parsed at once with JSON.parse on the event loop: an upstream that sent
 * hundreds of megabytes would stall every other request for seconds and could exhaust memory.
 * A longer answer (by its Content-Length, or as it arrives) rejects with BodyTooLargeError and
 * the connection is dropped; the caller treats it as the upstream failing.
 */
export function boundedFetch(maxBytes: number): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    const declared = Number(res.headers.get('content-length') ?? '');
    if (declared > maxBytes) {
      await res.body?.cancel().catch(() => {});
      throw new BodyTooLargeError(maxBytes);
    }
    const chunks: Uint8Array[] = [];
    let size = 0;
    if (res.body) {
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        size += value.byteLength;
        if (size > maxBytes) {
          await reader.cancel().catch(() => {});
          throw new BodyTooLargeError(maxBytes);
        }
        chunks.push(value);
      }
    }
    const noBody = res.status === 204 || res.status === 304;
    return new Response(noBody ? null : Buffer.concat(chunks), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}
