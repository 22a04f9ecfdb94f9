import { closeSync, constants, mkdirSync, openSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { dirname, resolve } from 'node:path';
import SQLite from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteAdapter, SqliteDialect, sql } from 'kysely';
import pg from 'pg';
import type { DB } from './schema.js';
import { migrateToLatest, requireCurrentSchema } from './migrations.js';
import { StorageFailure } from './failures.js';
import { WalSync } from './wal-sync.js';

const requireHere = createRequire(import.meta.url);

export type Dialect = 'sqlite' | 'postgres';

export interface Database {
  db: Kysely<DB>;
  dialect: Dialect;
  /** Resolves when the database answers a trivial query; rejects otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
  /** SQLite on a file only: its WAL, as write transactions use it (see writeTransaction). */
  wal?: {
    /** Syncs the WAL off the event loop. */
    sync: WalSync;
    /**
     * When the WAL has grown past its restart size: resolves once the background checkpointer
     * has copied all of it into the database file, so that the next write transaction starts it
     * over (see startCheckpointer). Undefined otherwise.
     */
    restartPending(): Promise<void> | undefined;
    /**
     * Calls `listener` once if the background checkpointer stops on its own (an error, an exit):
     * the serving connection checkpoints inside its commits from then on, slower but safe.
     */
    onCheckpointerLost(listener: (err: Error) => void): void;
  };
}

export interface DatabaseOptions {
  /** PostgreSQL only: the schema every connection uses (tests give each run its own). */
  pgSchema?: string;
  /** PostgreSQL only: pool size. */
  poolSize?: number;
  /** SQLite only: WAL frames after which write transactions wait for it to start over (tests). */
  walRestartFrames?: number;
  /** PostgreSQL only: how long a statement waits for a lock before it fails (ms; tests). */
  pgLockTimeoutMs?: number;
  /** PostgreSQL only: how long a transaction may sit idle before the server ends it (ms; tests). */
  pgIdleInTransactionMs?: number;
  /** PostgreSQL only: how long a query may go unanswered before its connection is dropped (ms; tests). */
  pgQueryDeadlineMs?: number;
  /**
   * Refuse a database that does not already hold this version's schema, instead of migrating it
   * (the operator CLI: a wrong DATABASE_URL must not get an empty paywarden database made in it).
   */
  existingOnly?: boolean;
  /** SQLite only: the module the checkpointer worker loads as its driver (tests make it fail). */
  checkpointerDriver?: string;
}

/**
 * PostgreSQL session limits. Nothing of the service waits on anything outside the database inside
 * a transaction (chain reads, payments and signatures happen before or after), so a transaction
 * idle for seconds belongs to an instance that stopped mid-way (a frozen VM, a long pause, a
 * partition): the server ends it and releases its locks, and the writes of the others go on. A
 * lock held longer than PG_LOCK_TIMEOUT_MS by anyone (an operator's open transaction, say) turns
 * the waiting requests into 503s instead of hanging them without limit (only those of the policies
 * still held: GroupCommitter decides the rest of their batch again). Both well above what a
 * healthy batch holds a lock (milliseconds). Migrations wait MIGRATION_LOCK_WAIT_MS at a time
 * (see openDatabase).
 */
export const PG_LOCK_TIMEOUT_MS = 10_000;
export const PG_IDLE_IN_TRANSACTION_MS = 5_000;
/**
 * How long a query may go unanswered before its connection is taken for dead and dropped, and the
 * query fails as a storage failure (503; a decision retried with the same requestId is never made
 * twice). A connection that a failover, a NAT or a load balancer dropped without a word (no RST)
 * otherwise held its request, the decision batch it was in and every batch queued behind it, and
 * the shutdown, for as long as TCP took to notice: many minutes. Well above PG_LOCK_TIMEOUT_MS,
 * the longest a healthy statement waits. Not applied to migrations, which may take long.
 */
export const PG_QUERY_DEADLINE_MS = 30_000;

/** Opens the database named by `url` and brings its schema to the latest migration. */
export async function openDatabase(url: string, opts: DatabaseOptions = {}): Promise<Database> {
  const postgres = url.startsWith('postgres');
  // Opening an SQLite file for use writes to it (WAL mode, the checkpointer): a file that is
  // not the service's is checked over a read-only connection first, and left as it was.
  if (opts.existingOnly && !postgres) await requireCurrentSqliteFile(url);
  const deadline = { ms: 0 };
  const database = postgres ? openPostgres(url, opts, deadline) : openSqlite(url, opts);
  try {
    if (postgres) await requireUnicode(database.db);
    if (opts.existingOnly) {
      if (postgres) await requireCurrentSchema(database.db, 'postgres', opts.pgSchema ?? (await migrationRecordsSchema(database.db)));
    } else if (database.dialect === 'postgres') {
      // Another instance may be migrating the same database: Kysely's migration lock waits for it
      // (up to an hour). A table another client keeps busy is waited for MIGRATION_LOCK_WAIT_MS
      // at a time, so that the queries of running instances never queue behind the migration
      // for longer: the migration is rolled back and tried again, however long it takes.
      const schema = opts.pgSchema ?? (await migrationRecordsSchema(database.db));
      for (let attempt = 1; ; attempt++) {
        try {
          await migrateToLatest(database.db, 'postgres', schema);
          break;
        } catch (err) {
          if (!(err instanceof Error) || (err.cause as { code?: unknown } | undefined)?.code !== '55P03') throw err;
          await new Promise((retry) => setTimeout(retry, Math.min(attempt * 250, 5_000)));
        }
      }
    } else {
      await migrateToLatest(database.db, database.dialect);
    }
  } catch (err) {
    await database.close();
    throw err;
  }
  deadline.ms = opts.pgQueryDeadlineMs ?? PG_QUERY_DEADLINE_MS;
  return database;
}

/**
 * Names, request ids and agent ids may hold any Unicode text. A database in another encoding
 * (LATIN1, say) refuses what it cannot represent with an error that fails the whole batch of
 * decisions it arrives in, other policies' included: such a database is refused at start, before
 * anything is made in it. SQL_ASCII stores bytes as they come, so it keeps UTF-8 text as it is.
 */
async function requireUnicode(db: Kysely<DB>): Promise<void> {
  const { rows } = await sql<{ encoding: string }>`select pg_encoding_to_char(encoding) as encoding from pg_database where datname = current_database()`.execute(db);
  const encoding = rows[0]?.encoding ?? 'UTF8';
  if (encoding !== 'UTF8' && encoding !== 'SQL_ASCII') {
    throw new Error(`the PostgreSQL database DATABASE_URL names is encoded ${encoding}; paywarden keeps Unicode text and needs a UTF8 database (create database … encoding 'UTF8' template template0)`);
  }
}

/**
 * Where the migrations' records live on PostgreSQL: beside the tables, in the first schema of the
 * connection's search_path (a role's own schema, or the one DATABASE_URL's `options` sets), so
 * that a role that may not create in `public` can start, and two deployments in two schemas of
 * one database each have their own. Before this, the records were always kept in `public`, and a
 * deployment that has its records there goes on using them: one whose tables are in its own
 * schema, and one whose tables are in `public` too, still on its search_path, after a schema
 * named after the role (which made them) appeared before it. Else it would start over, empty,
 * with a new signing key.
 *
 * Records in `public` count only when they are paywarden's (another application's Kysely
 * records are not). When the first schema holds nothing of paywarden's and `public`, also on the
 * search_path, holds a deployment, that is either such a deployment or a new one meant for the
 * first schema beside it (staging beside production): the start is refused rather than guessed,
 * since guessing wrong either serves the other deployment's policies and signing key or hides
 * this one's. Only the catalogue is read, which needs no privilege on `public`.
 */
async function migrationRecordsSchema(conn: Kysely<DB>): Promise<string> {
  const { rows } = await sql<{ schema: string | null; user: string; here: boolean; tables: boolean; inPublic: boolean; publicOwn: boolean; publicOnPath: boolean }>`
    with rel as (
      select n.nspname, c.relname, has_schema_privilege(n.oid, 'usage') and has_table_privilege(c.oid, 'select') as readable,
        c.relowner = (select oid from pg_catalog.pg_roles where rolname = current_user) as own
      from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
      where c.relname in ('kysely_migration', 'kv') and (n.nspname = current_schema() or n.nspname = 'public')
    )
    select current_schema() as schema, current_user as user,
      exists (select 1 from rel where nspname = current_schema() and relname = 'kysely_migration') as here,
      exists (select 1 from rel where nspname = current_schema() and relname = 'kv') as tables,
      exists (select 1 from rel where nspname = 'public' and relname = 'kysely_migration' and readable) as "inPublic",
      exists (select 1 from rel where nspname = 'public' and relname = 'kysely_migration' and own) as "publicOwn",
      exists (select 1 from rel where nspname = 'public' and relname = 'kv') and 'public' = any(current_schemas(false)) as "publicOnPath"`.execute(conn);
  const r = rows[0];
  // No schema of the search_path exists (or none the role may use: a typo in the URL's
  // `options`, a schema not made yet). Nothing unqualified can be found or made then: records
  // looked for in public instead were found complete beside a deployment there, and the first
  // query failed with 'relation "…" does not exist', which named neither cause nor fix (the
  // service's start, on the kv table; the CLI, on each command).
  if (!r?.schema) {
    const { rows: path } = await sql<{ path: string }>`select current_setting('search_path') as path`.execute(conn);
    throw new Error(
      `the search_path of DATABASE_URL's connections (${path[0]?.path ?? ''}) names no schema that exists and that ${r?.user ?? 'its role'} may use: ` +
        "create that schema (owned by the service's role), or correct search_path in the URL's options, PGOPTIONS or the role's settings",
    );
  }
  if (r.here || !r.inPublic) return r.schema;
  const { rows: ours } = await sql<{ ours: boolean }>`select exists (select 1 from public.kysely_migration where name = '0001_foundation') as ours`.execute(conn);
  if (!ours[0]?.ours) return r.schema;
  // The role's own schema appeared before its own deployment in public (another role's, one it
  // may read or is a member of, is not its deployment).
  if (r.tables || (r.publicOnPath && r.schema === r.user && r.publicOwn)) return 'public';
  if (r.publicOnPath) {
    throw new Error(
      `the first schema of its search_path, ${r.schema}, holds no paywarden tables, while public, also on it, holds a paywarden deployment. ` +
        `To use that deployment, put public first (or take ${r.schema} off the search_path); to keep a deployment of its own in ${r.schema}, take public off the search_path`,
    );
  }
  return r.schema;
}

/**
 * The file holds the receipt signing key (a local user who reads it can sign receipts the JWKS
 * vouches for) and pilot leads' e-mail addresses: a new file and a new folder for it are made
 * readable by the service's user alone, whatever the umask (SQLite gives its -wal and -shm files
 * the database file's mode). An existing file keeps the mode its operator gave it.
 */
function createPrivately(file: string): void {
  mkdirSync(dirname(resolve(file)), { recursive: true, mode: 0o700 });
  // Without O_EXCL, so that a symbolic link to a file yet to be made (on a data volume) is
  // followed and its target made 0600. The mode applies only to a file this creates.
  let fd: number | undefined;
  try {
    fd = openSync(file, constants.O_CREAT | constants.O_RDONLY, 0o600);
  } catch {
    // SQLite opens it next, and says why it cannot.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

async function requireCurrentSqliteFile(url: string): Promise<void> {
  const file = sqliteFileOf(url);
  const db = new Kysely<DB>({ dialect: new SqliteDialect({ database: new SQLite(file ?? ':memory:', { readonly: file !== undefined, fileMustExist: file !== undefined }) }) });
  try {
    await requireCurrentSchema(db, 'sqlite');
  } finally {
    await db.destroy();
  }
}

/**
 * Copies an SQLite database, while the service runs, into a new file `target` (mode 0600, as it
 * holds the generated receipt signing key), with SQLite's online backup: a consistent copy of
 * the database and its WAL, which copying the files by hand is not. An existing `target` is an
 * error, never overwritten.
 */
export async function backupSqlite(file: string, target: string): Promise<void> {
  const source = new SQLite(file, { readonly: true, fileMustExist: true });
  try {
    closeSync(openSync(target, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY, 0o600));
    try {
      // Every page in one step, within one read transaction: copied a few pages at a time, the
      // backup starts over after each write of the service, and beside a busy one never ends.
      await source.backup(target, { progress: () => BACKUP_ALL_PAGES });
    } catch (err) {
      rmSync(target, { force: true }); // half a copy is no backup, and would block the next try
      throw err;
    }
  } finally {
    source.close();
  }
}

/** better-sqlite3's backup copies this many pages per step (SQLite's "all", as a positive count). */
const BACKUP_ALL_PAGES = 0x7fffffff;

/** The file an `sqlite:` URL names; undefined for PostgreSQL and for an in-memory database. */
export function sqliteFileOf(url: string): string | undefined {
  if (!url.startsWith('sqlite:')) return undefined;
  const file = url.slice('sqlite:'.length);
  return file === ':memory:' ? undefined : file;
}

function openSqlite(url: string, opts: DatabaseOptions): Database {
  const file = sqliteFileOf(url);
  if (file) createPrivately(file);
  const sqlite = new SQLite(file ?? ':memory:');
  // WAL lets readers proceed during a write; synchronous=FULL makes an acknowledged commit
  // survive a power loss, which a payment-safety service owes its callers. (Write transactions
  // sync the same WAL off the event loop before they resolve: see writeTransaction.)
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = FULL');
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('foreign_keys = ON');
  // What a purge deletes (personal data past its retention) is overwritten with zeros, not left
  // readable in the file's free space until SQLite happens to reuse it.
  sqlite.pragma('secure_delete = ON');
  // A WAL that one large transaction grew (a long history purged at once, an upgrade's
  // migration) is cut back to the size it is started over at, the next time it is, instead of
  // keeping its largest size on disk until the process ends.
  const restartFrames = opts.walRestartFrames ?? WAL_RESTART_FRAMES;
  sqlite.pragma(`journal_size_limit = ${restartFrames * Number(sqlite.pragma('page_size', { simple: true }))}`);
  // Money columns hold micro-USDC; reading them as JavaScript numbers would lose precision.
  sqlite.defaultSafeIntegers(true);
  const checkpointer = file === undefined ? undefined : startCheckpointer(sqlite, file, restartFrames, opts.checkpointerDriver);
  // The WAL lies beside the file SQLite resolved (a symbolic link to the database, or to a folder
  // on its path, is followed), which need not be beside the path configured.
  const mainFile = (sqlite.pragma('database_list') as Array<{ name: string; file: string }>).find((d) => d.name === 'main')!.file;
  const walPath = `${mainFile}-wal`;
  const wal = checkpointer && {
    sync: new WalSync(sqlite, walPath, { dbPath: mainFile }),
    restartPending: () => checkpointer.restartPending(),
    onCheckpointerLost: (listener: (err: Error) => void) => checkpointer.onLost(listener),
  };
  const db = new Kysely<DB>({ dialect: new TransactionalDdlSqliteDialect({ database: withStatementCache(sqlite, () => wal?.sync.failed) }) });
  return {
    db,
    dialect: 'sqlite',
    ...(wal ? { wal } : {}),
    ping: async () => {
      // After a failed fsync, or with the database file deleted or replaced under the service,
      // nothing can be written safely: not ready.
      wal?.sync.checkFiles();
      await sql`select 1`.execute(db);
    },
    close: async () => {
      await wal?.sync.close();
      await checkpointer?.stop();
      await db.destroy();
    },
  };
}

/**
 * How often the background checkpointer copies the WAL into the database file. Often, so that
 * each checkpoint writes little: on ext4 a commit's fsync can wait for data a checkpoint has
 * written but not yet synced. Measured under a steady decision load, 500 ms let single commits
 * stall for 12 ms; at 100 ms and below they stayed under 9 ms. An idle database costs one
 * empty check per interval.
 */
const CHECKPOINT_INTERVAL_MS = 100;
/**
 * Pages in the WAL after which the serving connection checkpoints itself (a safety net). It
 * must stay above WAL_RESTART_FRAMES: past it, every commit checkpoints on the event loop.
 */
const FALLBACK_AUTOCHECKPOINT_PAGES = 60_000;
/**
 * Frames in the WAL after which the next write transaction waits for a complete checkpoint, so
 * that it starts the WAL over (about 160 MB; see startCheckpointer). That wait holds every write
 * for the checkpoint's two fsyncs, 6 to 12 ms under load. At 4,000 frames a steady 1,700
 * decisions/s (about 12,000 frames/s) paid it every 400 ms, and the slow requests of a run came
 * in clusters exactly that far apart; at 40,000 it comes every 3 s or so. A larger WAL costs only
 * disk space: readers look up only the frames not yet checkpointed, which the worker keeps to
 * the last 100 ms or so whatever the size of the file, and the file is reused, not regrown.
 */
const WAL_RESTART_FRAMES = 40_000;
/** How long a write waits for that checkpoint before it goes ahead anyway (a stuck worker). */
const WAL_RESTART_WAIT_MS = 2_000;

/**
 * WAL checkpoints off the event loop. better-sqlite3 is synchronous, and SQLite's automatic
 * checkpoint runs inside the commit that crosses 1,000 WAL pages: it copies the pages into the
 * database file and fsyncs it, stalling every request for several milliseconds (the tail of the
 * protected-decision latency). A worker thread with its own connection runs PASSIVE checkpoints
 * instead, which never block the writer; the serving connection checkpoints itself only if the
 * WAL grows far beyond that (the worker stopped or fell behind).
 *
 * SQLite starts the WAL over only when a write transaction begins after a checkpoint copied
 * every frame in it. Under a steady stream of writes a PASSIVE checkpoint never quite catches
 * up (frames are added while it copies), so the WAL used to grow to the fallback size, and then
 * the serving connection checkpointed on the event loop after its commits: 10 to 17 ms stalls,
 * every two seconds or so at 2,000 decisions/s. So the worker reports when the WAL passes
 * `restartFrames`; the next write transaction then asks it for one more checkpoint and begins
 * only once that has copied everything (no writer adds frames meanwhile), and so starts the WAL
 * over. The event loop serves requests during that wait; only writes wait.
 */
function startCheckpointer(
  sqlite: SQLite.Database,
  file: string,
  restartFrames: number,
  driver = requireHere.resolve('better-sqlite3'),
): { stop(): Promise<void>; restartPending(): Promise<void> | undefined; onLost(listener: (err: Error) => void): void } {
  sqlite.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const Database = require(workerData.driver);
     const db = new Database(workerData.file);
     const checkpoint = () => {
       try { return db.pragma('wal_checkpoint(PASSIVE)')[0]; } catch { return undefined; /* busy: the next round catches up */ }
     };
     let reported = false;
     const timer = setInterval(() => {
       const r = checkpoint();
       if (r && r.log > workerData.restartFrames && !reported) { reported = true; parentPort.postMessage('large'); }
     }, workerData.intervalMs);
     parentPort.on('message', (m) => {
       if (m === 'checkpoint') { checkpoint(); reported = false; parentPort.postMessage('checkpointed'); }
       else if (m === 'stop') { clearInterval(timer); db.close(); parentPort.close(); }
     });`,
    {
      eval: true,
      workerData: { driver, file: resolve(file), intervalMs: CHECKPOINT_INTERVAL_MS, restartFrames },
    },
  );
  worker.unref();
  let exited = false;
  let large = false;
  let restarting: Promise<void> | undefined;
  /** Ends the wait of the restart in flight. */
  let checkpointed: (() => void) | undefined;
  worker.on('message', (m) => {
    if (m === 'large') large = true;
    else if (m === 'checkpointed') checkpointed?.();
  });
  let stopping = false;
  let lostListener: ((err: Error) => void) | undefined;
  let lostWith: Error | undefined;
  // Losing the worker only brings back the slower in-line checkpoints; it never loses data.
  const lost = (err: Error) => {
    if (lostWith) return;
    lostWith = err;
    try {
      sqlite.pragma('wal_autocheckpoint = 1000');
    } catch {
      /* already closed */
    }
    lostListener?.(err);
  };
  worker.once('exit', (code) => {
    exited = true;
    checkpointed?.();
    if (!stopping) lost(new Error(`SQLite checkpointer worker exited (code ${code})`));
  });
  worker.on('error', lost);
  return {
    restartPending() {
      if (restarting || !large || exited) return restarting;
      large = false;
      restarting = new Promise<void>((done) => {
        const timer = setTimeout(done, WAL_RESTART_WAIT_MS);
        timer.unref();
        checkpointed = () => {
          clearTimeout(timer);
          done();
        };
        worker.postMessage('checkpoint');
      }).finally(() => {
        checkpointed = undefined;
        restarting = undefined;
      });
      return restarting;
    },
    onLost(listener) {
      lostListener = listener;
      if (lostWith) listener(lostWith);
    },
    async stop() {
      stopping = true;
      if (exited) return;
      // Held open until the worker has closed its connection (2 s at most): the worker is
      // unref'd, and a process with nothing else left to wait on would otherwise end here, with
      // close() never settling (exit code 13 for a script that awaits it at top level).
      worker.ref();
      const gone = new Promise<void>((done) => worker.once('exit', () => done()));
      worker.postMessage('stop');
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([gone, new Promise<void>((done) => (timer = setTimeout(done, 2000)))]);
      clearTimeout(timer);
      await worker.terminate();
    },
  };
}

/**
 * SQLite runs DDL inside transactions, but Kysely's SQLite adapter says it cannot, so its migrator
 * ran each statement on its own and recorded a migration only after it: a start stopped between
 * two statements of a migration (a kill, a crash, a full disk) left it half done, and every later
 * start failed on it ("table … already exists"). Said as it is, the migrator runs the pending
 * migrations with their records in one transaction, as on PostgreSQL: all of them or none. (Only
 * the migrator reads this flag.)
 */
class TransactionalDdlSqliteDialect extends SqliteDialect {
  override createAdapter(): SqliteAdapter {
    return new (class extends SqliteAdapter {
      override get supportsTransactionalDdl(): boolean {
        return true;
      }
    })();
  }
}

/**
 * Kysely prepares every query anew; with better-sqlite3 that compile step cost about as much as
 * running the statement. Statements are kept by their SQL text (the same text is the same
 * statement; parameters are bound at each run), in a bounded map.
 */
function withStatementCache(sqlite: SQLite.Database, syncFailed: () => Error | undefined, limit = 500) {
  const cache = new Map<string, SQLite.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(text: string) {
      let stmt = cache.get(text);
      if (!stmt) {
        if (cache.size >= limit) cache.clear();
        stmt = sqlite.prepare(text);
        cache.set(text, stmt);
      }
      // After a failed WAL sync no write can be acknowledged (see WalSync), whichever path it
      // takes: a policy created, replaced or given a new agent key outside writeTransaction could
      // be lost in a crash as surely as a decision. Reads (and BEGIN, COMMIT, ROLLBACK) go on.
      if (!stmt.readonly) {
        const failed = syncFailed();
        if (failed) throw failed;
      }
      return stmt;
    },
  };
}

function openPostgres(url: string, opts: DatabaseOptions, deadline: QueryDeadline): Database {
  const { connectionString, operatorOptions } = withoutOptions(url);
  const pool = new pg.Pool({
    connectionString,
    max: opts.poolSize ?? 10,
    connectionTimeoutMillis: 5000,
    // TCP keepalive: an idle connection whose peer is gone is noticed and replaced (the deadline
    // below covers one that a query is waiting on).
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    // Names the service's connections in pg_stat_activity (and a test's, by its schema).
    application_name: opts.pgSchema ? `paywarden:${opts.pgSchema}` : 'paywarden',
    options: [
      // The locking of decision batches assumes READ COMMITTED: a database or role whose default is
      // stricter would fail whole batches with serialization errors (503s) instead.
      '-c default_transaction_isolation=read\\ committed',
      `-c lock_timeout=${opts.pgLockTimeoutMs ?? PG_LOCK_TIMEOUT_MS}`,
      `-c idle_in_transaction_session_timeout=${opts.pgIdleInTransactionMs ?? PG_IDLE_IN_TRANSACTION_MS}`,
      ...(opts.pgSchema ? [`-c search_path=${opts.pgSchema}`] : []),
      // node-postgres would let either replace all of the above; appended, they only override
      // what they name.
      ...operatorOptions,
    ].join(' '),
  });
  // A dropped idle connection must not crash the process; the next query reconnects.
  pool.on('error', () => {});
  // Nor one that drops while it is checked out: it emits 'error' as well as failing its query,
  // pg-pool listens only to idle ones, and an 'error' event with no listener ends the process.
  // Listened to from the moment the pool has it: a listener added once the checkout resolved
  // left a moment in which an administrator's pg_terminate_backend crashed a test run. The
  // failed query answers its request (503); the pool then discards the connection.
  pool.on('connect', (client) => client.on('error', () => {}));
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool: withNamedStatements(pool, deadline) }) });
  return {
    db,
    dialect: 'postgres',
    ping: async () => {
      // A database that takes no writes (set read-only, or a standby) cannot serve: not ready.
      const { rows } = await sql<{ ro: string }>`select current_setting('transaction_read_only') as ro`.execute(db);
      if (rows[0]?.ro === 'on') throw new StorageFailure('the database is read-only');
    },
    close: () => db.destroy(),
  };
}

/**
 * The URL without its `options` parameter, and the operator's own session options: PGOPTIONS,
 * then the URL's (a hosted database's endpoint, say), in the order PostgreSQL should apply them.
 */
function withoutOptions(url: string): { connectionString: string; operatorOptions: string[] } {
  const env = process.env.PGOPTIONS?.trim();
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined; // node-postgres reads forms the URL class does not; it gets them as they are
  }
  const fromUrl = parsed?.searchParams.get('options')?.trim();
  if (parsed && fromUrl !== undefined) parsed.searchParams.delete('options');
  return {
    connectionString: parsed && fromUrl !== undefined ? parsed.toString() : url,
    operatorOptions: [env, fromUrl].filter((o): o is string => !!o),
  };
}

/** SQL texts of the hot queries (see preparedQuery), by the statement name they get on PostgreSQL. */
const namedStatements = new Map<string, string>();

/** Marks a query text as hot: on PostgreSQL every connection parses and plans it only once. */
export function registerHotStatement(text: string): void {
  if (!namedStatements.has(text)) namedStatements.set(text, `paywarden_${namedStatements.size + 1}`);
}

type PgQuery = (...args: unknown[]) => unknown;
/** PG_QUERY_DEADLINE_MS once the schema is migrated; 0 (none) before. */
interface QueryDeadline {
  ms: number;
}
const WRAPPED = Symbol('paywarden.namedStatements');

/**
 * Kysely sends every query unnamed, so PostgreSQL parses and plans it anew each time; for the
 * few queries every protected decision runs, that was a large part of the server's work. Clients
 * of this pool send those texts as named prepared statements instead (node-postgres keeps them
 * per connection); everything else goes through unchanged.
 */
function withNamedStatements(pool: pg.Pool, deadline: QueryDeadline) {
  return {
    async connect() {
      const client = await pool.connect();
      const c = client as unknown as { query: PgQuery; connection?: { stream?: { destroy(err: Error): void } }; [WRAPPED]?: true };
      if (!c[WRAPPED]) {
        const query = c.query.bind(client);
        c.query = (text: unknown, ...rest: unknown[]) => {
          const name = typeof text === 'string' ? namedStatements.get(text) : undefined;
          const result = name ? query({ name, text, values: rest[0] }) : query(text, ...rest);
          if (!deadline.ms || !(result instanceof Promise)) return result;
          // No answer in time: the connection is dropped. Its queries fail with this error, and
          // the pool discards it when it is given back (see PG_QUERY_DEADLINE_MS).
          const ms = deadline.ms;
          const timer = setTimeout(() => c.connection?.stream?.destroy(new StorageFailure(`PostgreSQL did not answer within ${ms} ms`)), ms);
          return result.finally(() => clearTimeout(timer));
        };
        c[WRAPPED] = true;
      }
      return client;
    },
    end: () => pool.end(),
  };
}
