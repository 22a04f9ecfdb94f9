import { performance } from 'node:perf_hooks';
import type { ChildMessage, ParentMessage, TargetModule } from './types.js';

const send = (msg: ChildMessage) => process.send?.(msg);

/**
 * The child side of startTarget(): starts the target on 127.0.0.1 (a free port), reports
 * {port, load} over IPC, answers CPU-usage probes, and closes when told to stop or orphaned.
 */
export async function serveTarget(label: string, load: () => Promise<{ default: TargetModule }>): Promise<void> {
  try {
    if (!process.send) throw new Error(`${label}: start benchmark servers with startTarget() (they need an IPC channel)`);
    const { default: mod } = await load();
    const target = await mod.start();
    const address = await target.listen({ host: '127.0.0.1', port: 0 });
    const port = Number(new URL(address).port);

    let closing = false;
    const close = async () => {
      if (closing) return;
      closing = true;
      try {
        await target.close();
      } finally {
        process.exit(0);
      }
    };
    process.on('message', (msg: ParentMessage) => {
      if (msg.type === 'cpu') {
        const cpu = process.cpuUsage();
        const mem = process.memoryUsage();
        const loop = performance.eventLoopUtilization();
        send({
          type: 'cpu',
          id: msg.id,
          userMicros: cpu.user,
          systemMicros: cpu.system,
          wallMicros: Number(process.hrtime.bigint() / 1000n),
          rssBytes: mem.rss,
          heapUsedBytes: mem.heapUsed,
          loopActiveMs: loop.active,
          loopIdleMs: loop.idle,
        });
      } else if (msg.type === 'stop') {
        void close();
      }
    });
    process.on('disconnect', () => void close());
    process.on('SIGTERM', () => void close());
    process.on('SIGINT', () => void close());

    send({ type: 'ready', port, load: target.load, pid: process.pid });
  } catch (err) {
    const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
    send({ type: 'error', message });
    console.error(`bench server ${label}: ${message}`);
    process.exit(1);
  }
}
