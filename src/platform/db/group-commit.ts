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

/**
 * Group commit: write jobs that arrive while a transaction is running are queued and then run,
 * one after another, inside ONE transaction, so one durable commit (one fsync) acknowledges many
 * of them. Each job still sees every earlier job's writes, exactly as if they had committed
 * separately, so budgets stay exact. A job that answers with an AppError (a 4xx, raised before
 * it writes anything) fails alone; any other error rolls the whole batch back and fails every
 * job in it, and nothing of it is acknowledged.
 *
 * On PostgreSQL the batch first locks every policy row it touches, in id order: several service
 * instances batching concurrently then always lock in the same order and cannot deadlock.
 */
export class GroupCommitter {
  private queue: Job<unknown>[] = [];
  private draining = false;

  constructor(
    private readonly database: Database,
    private readonly maxBatch = 64,
  ) {}

  run<T>(lockIds: string[], work: (tx: Tx) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ lockIds, work, resolve, reject } as Job<unknown>);
      if (!this.draining) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.draining = true;
    try {
      while (this.queue.length > 0) {
        // better-sqlite3 runs a whole transaction without leaving the microtask queue; yield
        // once so requests already read from their sockets can join this batch.
        await new Promise<void>((resolve) => setImmediate(resolve));
        const batch = this.queue.splice(0, this.maxBatch);
        await this.commit(batch);
      }
    } finally {
      this.draining = false;
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
