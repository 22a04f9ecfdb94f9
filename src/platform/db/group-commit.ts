import { setImmediate as nextTurn } from 'node:timers/promises';
import { sql, type Kysely } from 'kysely';
import type { Database } from './database.js';
import type { DB } from './schema.js';
import { writeTransaction, type Tx } from './tx.js';
import { AppError } from '../errors.js';

/** What one job of a batch came to: a value, or an AppError (a 4xx) that fails that job alone. */
export type JobOutcome<T> = { ok: true; value: T } | { ok: false; error: AppError };

/** The outcome of a job that threw `err`: an AppError fails that job alone; anything else is rethrown. */
export function failedJob(err: unknown): JobOutcome<never> {
  if (err instanceof AppError) return { ok: false, error: err };
  throw err;
}

/**
 * Runs several jobs of one kind inside the batch's transaction at once (for example, all the
 * protected decisions that arrived together: one read and one write for all of them). It returns
 * one outcome per item, in order; it must fail an item only with an AppError raised before it
 * wrote anything for that item, and throw anything else (which rolls the whole batch back).
 */
export interface BatchHandler<I, T> {
  (tx: Tx, items: I[]): Promise<JobOutcome<T>[]>;
  /**
   * PostgreSQL only, optional: the same work without the batch's transaction and locks, for a
   * handler that can check under the locks, in its final write, that what it read has not
   * changed. It returns undefined when it has (a writer outside this process got there first),
   * having stored nothing; the batch then runs the usual way, in a transaction under the locks.
   * `lockIds` are the ids the batch would lock (sorted, once each): the ones its write must lock.
   */
  withoutLocks?: (db: Kysely<DB>, items: I[], lockIds: string[]) => Promise<JobOutcome<T>[] | undefined>;
}

interface Job {
  lockIds: string[];
  handler: BatchHandler<unknown, unknown>;
  item: unknown;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/** A handler's outcomes, checked to be one per job it was given. */
function onePerJob<T>(outcomes: JobOutcome<T>[], jobs: number): JobOutcome<T>[] {
  if (outcomes.length !== jobs) throw new Error(`batch handler returned ${outcomes.length} outcomes for ${jobs} jobs`);
  return outcomes;
}

/** Answers each job of `batch` with its outcome. */
function answer(batch: Job[], outcomes: JobOutcome<unknown>[]): void {
  batch.forEach((job, i) => {
    const o = outcomes[i]!;
    if (o.ok) job.resolve(o.value);
    else job.reject(o.error);
  });
}

/** PostgreSQL's lock_not_available: a lock was not granted within lock_timeout. */
const isLockTimeout = (err: unknown) => (err as { code?: unknown } | null)?.code === '55P03';

/** The ids a batch locks, in the order every writer locks them (so that none can deadlock), once each. */
const lockIdsOf = (batch: Job[]) => [...new Set(batch.flatMap((j) => j.lockIds))].sort();

/**
 * SQLite: event-loop turns a batch waits, beyond the first, while each brings more requests (see
 * gather). A bigger batch shares its fixed cost (BEGIN, COMMIT, the WAL sync, the signing
 * worker's round trip) among more decisions: at 1,600 decisions/s batches grew from about 1.9
 * to 2.4 decisions, and server CPU per decision fell by 4% on average in 14 paired A/B rounds
 * (13 of them lower), with no change in latency or saturation beyond the host's noise.
 */
const GATHER_TURNS = 4;

/** How long a policy found held by someone outside the service keeps to a lane of its own (see heldElsewhere). */
const HELD_LANE_MS = 60_000;

interface Lane {
  queue: Job[];
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
  /** Turns a batch may wait beyond the first (see gather): none on PostgreSQL. */
  private readonly gatherTurns: number;

  constructor(
    private readonly database: Database,
    private readonly maxBatch = 64,
    /**
     * PostgreSQL lanes (parallel transactions); keep it below the pool size. Two, measured with
     * decisions batched into one read and one write: one lane queues every policy behind one
     * commit (p99 28 to 42 ms at 1,500 decisions/s on 10 connections), while 3 to 8 lanes split
     * the same load into smaller batches that each pay a commit (saturation 2,400 to 3,000/s
     * against 3,200 to 3,500/s with two).
     */
    private readonly pgLanes = 2,
  ) {
    this.gatherTurns = database.dialect === 'postgres' ? 0 : GATHER_TURNS;
  }

  private laneOf(lockIds: string[]): string {
    if (this.database.dialect !== 'postgres') return '*';
    if (this.heldElsewhere.size && lockIds.some((id) => this.isHeldElsewhere(id))) return 'held';
    let h = 0;
    for (const id of [...lockIds].sort()) for (let i = 0; i < id.length; i++) h = (h * 31 + id.charCodeAt(i)) >>> 0;
    return String(h % this.pgLanes);
  }

  /**
   * PostgreSQL: policies whose rows someone outside the service held past the lock timeout lately,
   * until when (ms). Their jobs queue in a lane of their own for HELD_LANE_MS, so that each of
   * their batches, waiting out the lock timeout again, does not hold up the other policies of
   * their usual lane. Where a policy's jobs queue changes no answer: its row lock orders them.
   */
  private readonly heldElsewhere = new Map<string, number>();

  private isHeldElsewhere(id: string): boolean {
    const until = this.heldElsewhere.get(id);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.heldElsewhere.delete(id);
    return false;
  }

  private markHeld(ids: Iterable<string>): void {
    for (const id of ids) this.heldElsewhere.set(id, Date.now() + HELD_LANE_MS);
  }

  /** Runs `work` in the next batch's transaction, after every job queued before it. */
  run<T>(lockIds: string[], work: (tx: Tx) => Promise<T>): Promise<T> {
    // A handler of its own, so that this job never shares a call with another.
    const solo: BatchHandler<undefined, T> = async (tx) => {
      try {
        return [{ ok: true, value: await work(tx) }];
      } catch (err) {
        return [failedJob(err)];
      }
    };
    return this.runWith(lockIds, solo, undefined);
  }

  /** Queues `item` for `handler`, which gets it together with the items queued next to it. */
  runWith<I, T>(lockIds: string[], handler: BatchHandler<I, T>, item: I): Promise<T> {
    const key = this.laneOf(lockIds);
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { queue: [], draining: false };
      this.lanes.set(key, lane);
    }
    const target = lane;
    return new Promise<T>((resolve, reject) => {
      target.queue.push({ lockIds, handler: handler as BatchHandler<unknown, unknown>, item, resolve: resolve as (v: unknown) => void, reject });
      if (!target.draining) void this.drain(key, target);
    });
  }

  private async drain(key: string, lane: Lane): Promise<void> {
    lane.draining = true;
    try {
      while (lane.queue.length > 0) {
        await this.gather(lane);
        await this.commit(lane.queue.splice(0, this.maxBatch));
      }
    } finally {
      lane.draining = false;
      if (lane.queue.length === 0) this.lanes.delete(key);
    }
  }

  /**
   * Lets the requests that are arriving join the batch before it commits. better-sqlite3 runs a
   * whole transaction without leaving the microtask queue, so the lane first yields one
   * event-loop turn, in which requests already read from their sockets queue their jobs; on
   * SQLite it then waits up to GATHER_TURNS more turns, as long as each brings more jobs. A turn
   * that brings none ends the wait, so a lone decision waits two turns (microseconds on an idle
   * loop). PostgreSQL gets no more: its batches gather during their round trips, and there
   * the extra turns lowered saturation in two of three rounds.
   */
  private async gather(lane: Lane): Promise<void> {
    await nextTurn();
    for (let extra = 0; extra < this.gatherTurns && lane.queue.length < this.maxBatch; extra++) {
      const queued = lane.queue.length;
      await nextTurn();
      if (lane.queue.length === queued) return;
    }
  }

  /**
   * Runs one batch's transaction and answers its jobs once the commit is durable. On SQLite the
   * disk syncs off the event loop (writeTransaction), so requests keep being read, and queue up
   * for the next batch, while it does. The next batch waits for this sync rather than
   * committing during it: that made more and smaller batches, each paying a sync of its own.
   * Against the synchronous commit, committing during the sync gained 9% at saturation and cost
   * 110 µs of server CPU per decision at half of saturation; waiting gained 20% and cost 56 µs
   * (two A/B runs of four rounds each).
   */
  private async commit(batch: Job[]): Promise<void> {
    let outcomes: JobOutcome<unknown>[];
    try {
      outcomes = await this.attempt(batch);
    } catch (err) {
      if (isLockTimeout(err)) {
        const ids = lockIdsOf(batch);
        if (ids.length > 1) return this.withoutLockedPolicies(batch, err);
        this.markHeld(ids);
      }
      for (const job of batch) job.reject(err);
      return;
    }
    answer(batch, outcomes);
  }

  private async attempt(batch: Job[]): Promise<JobOutcome<unknown>[]> {
    return (await this.withoutLocks(batch)) ?? (await this.inTransaction(batch));
  }

  /**
   * PostgreSQL: a batch whose locks were not granted within the lock timeout (someone outside the
   * service holds a policy row: an operator's open transaction, say) rolled back whole. The jobs
   * of the policies still locked now fail with that error (503, retry later); the batch's other
   * jobs, of policies nobody holds, run again once, on their own: another tenant that happened to
   * share the batch is not refused for it. The held policies' next jobs queue apart for a while
   * (heldElsewhere).
   */
  private async withoutLockedPolicies(batch: Job[], lockError: unknown): Promise<void> {
    let locked: Set<string>;
    try {
      locked = await this.lockedElsewhere(lockIdsOf(batch));
    } catch {
      for (const job of batch) job.reject(lockError);
      return;
    }
    this.markHeld(locked);
    const free: Job[] = [];
    for (const job of batch) {
      if (job.lockIds.some((id) => locked.has(id))) job.reject(lockError);
      else free.push(job);
    }
    if (free.length === 0) return;
    try {
      answer(free, await this.attempt(free));
    } catch (err) {
      for (const job of free) job.reject(err);
    }
  }

  /** Of the policies `ids`, those that exist and whose rows another transaction holds right now. */
  private lockedElsewhere(ids: string[]): Promise<Set<string>> {
    return this.database.db.transaction().execute(async (tx) => {
      const existing = await tx.selectFrom('policies').select('id').where('id', 'in', ids).execute();
      const { rows } = await sql<{ id: string }>`select id from policies where id in (${sql.join(ids)}) for update skip locked`.execute(tx);
      const free = new Set(rows.map((r) => r.id));
      return new Set(existing.map((r) => r.id).filter((id) => !free.has(id)));
    });
  }

  /** Batches that ran without locks, and those of them that found their read changed and ran again under the locks. */
  readonly lockFree = { batches: 0, retried: 0 };

  /**
   * On PostgreSQL a batch of one handler that offers `withoutLocks` runs that first: two round
   * trips instead of five when nothing it read changed meanwhile. This instance runs a policy's
   * batches one after another, so only another instance, or a change to the policy itself (an
   * administrator's PUT, a new agent key), can make it run again under the locks.
   */
  private async withoutLocks(batch: Job[]): Promise<JobOutcome<unknown>[] | undefined> {
    const { handler } = batch[0]!;
    if (this.database.dialect !== 'postgres' || !handler.withoutLocks || batch.some((j) => j.handler !== handler)) return undefined;
    this.lockFree.batches++;
    const outcomes = await handler.withoutLocks(this.database.db, batch.map((j) => j.item), lockIdsOf(batch));
    if (!outcomes) {
      this.lockFree.retried++;
      return undefined;
    }
    return onePerJob(outcomes, batch.length);
  }

  private inTransaction(batch: Job[]): Promise<JobOutcome<unknown>[]> {
    return writeTransaction(this.database, async (tx) => {
      if (this.database.dialect === 'postgres') {
        const ids = lockIdsOf(batch);
        if (ids.length) await sql`select id from policies where id in (${sql.join(ids)}) order by id for update`.execute(tx);
      }
      const out: JobOutcome<unknown>[] = [];
      for (let start = 0; start < batch.length; ) {
        const { handler } = batch[start]!;
        let end = start + 1;
        while (end < batch.length && batch[end]!.handler === handler) end++;
        out.push(...onePerJob(await handler(tx, batch.slice(start, end).map((j) => j.item)), end - start));
        start = end;
      }
      return out;
    });
  }
}
