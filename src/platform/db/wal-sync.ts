import { close, fdatasync, fstatSync, open, statSync } from 'node:fs';
import { promisify } from 'node:util';
import type SQLite from 'better-sqlite3';
import { StorageFailure } from './failures.js';

const openFile = promisify(open);
const datasync = promisify(fdatasync);
const closeFile = promisify(close);

/**
 * Makes commits of an SQLite database durable off the event loop: an fdatasync of its WAL file
 * on libuv's thread pool (see writeTransaction in tx.ts).
 *
 * better-sqlite3 runs every statement on the calling thread, so under synchronous=FULL each
 * COMMIT holds the event loop for its fsync (0.2 to 0.5 ms, now and then 15 ms): nothing else is
 * served meanwhile. A commit under synchronous=NORMAL writes the same WAL frames without the
 * fsync, and one fdatasync of the WAL file afterwards makes them durable: fsync flushes a file's
 * pages whoever wrote them. A caller acknowledges such a commit only once `barrier()` resolved.
 *
 * Callers that arrive while a sync runs share the next one, which starts when it ends: the
 * running one may have started before their commit. A failed sync fails for good: after an
 * fsync error the kernel may have dropped the unwritten pages and a later fsync can succeed
 * without them, so no later write may be acknowledged either (the service must be restarted).
 */
export class WalSync {
  private fd?: number;
  private running?: Promise<void>;
  private queued?: Promise<void>;
  private failure?: Error;
  private readonly normal: SQLite.Statement;
  private readonly full: SQLite.Statement;
  /** The database file as opened (device and inode), to notice it deleted or replaced. */
  private readonly dbIdentity?: { path: string; dev: number; ino: number };

  private readonly sync: (fd: number) => Promise<void>;

  constructor(
    sqlite: SQLite.Database,
    private readonly walPath: string,
    opts: {
      /** The sync itself; tests replace it to hold or fail a sync. */
      sync?: (fd: number) => Promise<void>;
      /** The database file the WAL belongs to, checked along with it (checkFiles). */
      dbPath?: string;
    } = {},
  ) {
    this.normal = sqlite.prepare('pragma synchronous = normal');
    this.full = sqlite.prepare('pragma synchronous = full');
    this.sync = opts.sync ?? datasync;
    if (opts.dbPath !== undefined) {
      const st = statSync(opts.dbPath);
      this.dbIdentity = { path: opts.dbPath, dev: st.dev, ino: st.ino };
    }
  }

  /**
   * Fails for good (as a failed fsync does) once the database file or its WAL was deleted or
   * replaced while the service runs (a removed data folder, a tmp cleaner, a restore over a
   * running service): SQLite goes on writing to the unlinked files through its open descriptors,
   * and every commit "synced" there is gone when the process ends. Also run by the readiness check.
   * Two stat calls on the event loop (a few µs), once per batch: cheaper than two trips through
   * the thread pool in every commit's path.
   */
  checkFiles(): void {
    if (this.failure) throw this.failure;
    const gone = (why: string) => {
      this.failure ??= new StorageFailure(`the SQLite database ${why} while the service runs; no further write can be acknowledged`);
      return this.failure;
    };
    if (this.fd !== undefined) {
      if (fstatSync(this.fd).nlink === 0) throw gone('WAL file was deleted');
    }
    if (this.dbIdentity) {
      const { path, dev, ino } = this.dbIdentity;
      let now;
      try {
        now = statSync(path, { throwIfNoEntry: false });
      } catch (err) {
        throw gone(`file cannot be found (${(err as NodeJS.ErrnoException).code ?? 'stat failed'})`);
      }
      if (!now) throw gone('file was deleted');
      if (now.dev !== dev || now.ino !== ino) throw gone('file was replaced');
    }
  }

  /**
   * Runs `commit` (a transaction on the serving connection, which the caller holds) with
   * synchronous=NORMAL, so that its COMMIT writes the WAL without syncing it; statements
   * outside a write transaction still commit under synchronous=FULL.
   */
  async unsynced<T>(commit: () => Promise<T>): Promise<T> {
    this.normal.run();
    try {
      return await commit();
    } finally {
      this.full.run();
    }
  }

  /** The error of a failed sync, after which no write may be acknowledged. */
  get failed(): Error | undefined {
    return this.failure;
  }

  /** Resolves once everything committed before this call is on disk. */
  barrier(): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (!this.running) return this.start();
    this.queued ??= this.running
      .catch(() => {})
      .then(() => {
        this.queued = undefined;
        return this.failure ? Promise.reject(this.failure) : this.start();
      });
    return this.queued;
  }

  /** Waits for the syncs in flight, then releases the file. */
  async close(): Promise<void> {
    await Promise.allSettled([this.running, this.queued]);
    if (this.fd !== undefined) await closeFile(this.fd);
    this.fd = undefined;
  }

  private start(): Promise<void> {
    const run = this.syncOnce().finally(() => {
      if (this.running === run) this.running = undefined;
    });
    this.running = run;
    return run;
  }

  private async syncOnce(): Promise<void> {
    // Opened on first use: the WAL file exists once something was committed, and SQLite keeps
    // that same file while the serving connection is open. A failed open (EMFILE while a flood
    // of connections holds every descriptor) fails this barrier only: unlike a failed fsync it
    // loses nothing, and the next barrier syncs everything committed before it.
    if (this.fd === undefined) {
      try {
        this.fd = await openFile(this.walPath, 'r+');
      } catch (err) {
        throw new StorageFailure(`the SQLite WAL could not be opened to sync it: ${(err as Error).message}`);
      }
    }
    try {
      await this.sync(this.fd);
    } catch (err) {
      this.failure ??= new StorageFailure(`fsync of the SQLite WAL failed; no further write can be acknowledged: ${(err as Error).message}`);
      throw this.failure;
    }
    // Synced, but to files that may be gone: then it is not durable.
    this.checkFiles();
  }
}
