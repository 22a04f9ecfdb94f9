import { sql } from 'kysely';
import type { Database } from './database.js';
import { writeTransaction, type Tx } from './tx.js';
import { AppError } from '../errors.js';

interface Job<T> {
  lockIds: string[];
  work: (tx: Tx) => Promise<T>;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

interface Lane {
  queue: Job<unknown>[];
  draining: boolean;
}

/**
 * Group commit: write jobs that arrive while a transaction is running are queued and then run,
 * one after another, inside ONE transaction, so one durable commit (one fsync) acknowledges many
 * of them. Each job still sees every earlier job's writes, exactly as if they had committed
 * separately, so budgets stay exact. A job that answers with an AppError (a 4xx, raised before
 * it writes anything) fails alone; any other error rolls the whole batch back and fails every
 * job in it, and nothing of it is acknowledged.
 *
 * SQLite has one writer, so there is one lane for everything. PostgreSQL has a pool of
 * connections and row locks, so policies are spread over a few lanes by a hash of their ids:
 * lanes commit in parallel on their own connections, and each batch serves many policies with
 * one BEGIN, one lock statement and one COMMIT (a lane per policy made batches of one or two
 * decisions, and PostgreSQL spent its time on transactions, not decisions). A batch locks its
 * policy rows in id order, so instances batching concurrently cannot deadlock, before running
 * its jobs.
 */
export class GroupCommitter {
  private readonly lanes = new Map<string, Lane>();

  constructor(
    private readonly database: Database,
    private readonly maxBatch = 64,
    /** PostgreSQL lanes (parallel transactions); keep it below the pool size. */
    private readonly pgLanes = 4,
  ) {}

  private laneOf(lockIds: string[]): string {
    if (this.database.dialect !== 'postgres') return '*';
    let h = 0;
    for (const id of [...lockIds].sort()) for (let i = 0; i < id.length; i++) h = (h * 31 + id.charCodeAt(i)) >>> 0;
    return String(h % this.pgLanes);
  }

  run<T>(lockIds: string[], work: (tx: Tx) => Promise<T>): Promise<T> {
    const key = this.laneOf(lockIds);
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { queue: [], draining: false };
      this.lanes.set(key, lane);
    }
    const target = lane;
    return new Promise<T>((resolve, reject) => {
      target.queue.push({ lockIds, work, resolve, reject } as Job<unknown>);
      if (!target.draining) void this.drain(key, target);
    });
  }

  private async drain(key: string, lane: Lane): Promise<void> {
    lane.draining = true;
    try {
      while (lane.queue.length > 0) {
        // better-sqlite3 runs a whole transaction without leaving the microtask queue; yield
        // once so requests already read from their sockets can join this batch.
        await new Promise<void>((resolve) => setImmediate(resolve));
        await this.commit(lane.queue.splice(0, this.maxBatch));
      }
    } finally {
      lane.draining = false;
      if (lane.queue.length === 0) this.lanes.delete(key);
    }
  }

  private async commit(batch: Job<unknown>[]): Promise<void> {
    let outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: AppError }>;
    try {
      outcomes = await writeTransaction(this.database, async (tx) => {
        if (this.database.dialect === 'postgres') {
          const ids = [...new Set(batch.flatMap((j) => j.lockIds))].sort();
          if (ids.length) await sql`select id from policies where id in (${sql.join(ids)}) order by id for update`.execute(tx);
        }
        const out: typeof outcomes = [];
        for (const job of batch) {
          try {
            out.push({ ok: true, value: await job.work(tx) });
          } catch (err) {
            if (!(err instanceof AppError)) throw err;
            out.push({ ok: false, error: err });
          }
        }
        return out;
      });
    } catch (err) {
      for (const job of batch) job.reject(err);
      return;
    }
    batch.forEach((job, i) => {
      const o = outcomes[i]!;
      if (o.ok) job.resolve(o.value);
      else job.reject(o.error);
    });
  }
}
