import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

/**
 * A TCP relay to `host:port` on 127.0.0.1, for tests of a server that stops answering:
 * - `stall()` holds the client's bytes on every connection, new ones too, until `resume()` sends
 *   them on in order: a stopped or swapping server (connections stay open, nothing is answered);
 * - `silence()` drops every byte, both ways and for good, of the connections open now, while
 *   connections made later pass: a failover, a NAT or a load balancer that lost its state (no RST,
 *   no FIN).
 */
export async function tcpRelay(host: string, port: number) {
  let stalled = false;
  const held: Array<() => void> = [];
  const links = new Set<{ silenced: boolean; sockets: Socket[] }>();
  const server = createServer((client) => {
    const upstream = connect(port, host);
    const link = { silenced: false, sockets: [client, upstream] };
    links.add(link);
    client.on('data', (bytes) => {
      if (link.silenced) return;
      if (stalled) held.push(() => upstream.write(bytes));
      else upstream.write(bytes);
    });
    upstream.on('data', (bytes) => void (link.silenced || client.write(bytes)));
    for (const [a, b] of [[client, upstream], [upstream, client]] as const) {
      a.on('error', () => {});
      a.on('close', () => {
        links.delete(link);
        b.destroy();
      });
    }
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return {
    port: (server.address() as AddressInfo).port,
    stall: () => void (stalled = true),
    resume: () => {
      stalled = false;
      for (const send of held.splice(0)) send();
    },
    silence: () => links.forEach((link) => (link.silenced = true)),
    close: () => {
      links.forEach((link) => link.sockets.forEach((s) => s.destroy()));
      return new Promise<void>((done) => server.close(() => done()));
    },
  };
}
