import { copyFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/platform/db/database.js';
import { writeTransaction } from '../../src/platform/db/tx.js';
import { testDialect } from '../helpers/db.js';

// SQLite only: WAL checkpoints run on a worker thread, not inside a request's commit.
describe.skipIf(testDialect !== 'sqlite')('SQLite WAL checkpoints', () => {
  let dir: string;
  let database: Database;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'paywarden-ckpt-'));
    database = await openDatabase(`sqlite:${join(dir, 'db.sqlite')}`);
  });
  afterAll(async () => {
    await database.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /**
   * The rows a copy of the database file alone holds: what has been checkpointed out of the WAL.
   * A copy taken while the checkpointer is writing the file can be torn (SQLITE_CORRUPT or SQLITE_NOTADB): that
   * reads as nothing yet, and the caller looks again.
   */
  function leadsInMainFile(): number {
    const copy = join(dir, `copy-${Date.now()}.sqlite`);
    copyFileSync(join(dir, 'db.sqlite'), copy);
    const db = new SQLite(copy, { readonly: true });
    try {
      const table = db.prepare("select 1 from sqlite_master where name = 'pilot_leads'").get();
      return table ? Number((db.prepare('select count(*) as n from pilot_leads').get() as { n: number }).n) : 0;
    } catch (err) {
      if (/^SQLITE_(CORRUPT|NOTADB)/.test((err as { code?: string }).code ?? '')) return 0;
      throw err;
    } finally {
      db.close();
    }
  }

  it('a committed write reaches the database file within seconds, far below the 1,000-page auto-checkpoint', async () => {
    for (let i = 0; i < 5; i++) {
      await database.db
        .insertInto('pilot_leads')
        .values({ id: `lead_ckpt${i}`, email: `a${i}@example.com`, company: 'c', monthly_decisions: '<1k', needs: 'checkpoint test', source: '127.0.0.1', created_at: new Date().toISOString() })
        .execute();
    }
    // Five small rows are a handful of WAL pages: SQLite itself would not checkpoint them.
    let inFile = 0;
    for (let waited = 0; waited < 5000 && inFile < 5; waited += 100) {
      await new Promise((r) => setTimeout(r, 100));
      inFile = leadsInMainFile();
    }
    expect(inFile).toBe(5);
  });

  it('under a steady stream of writes the WAL starts over, far below the size at which the serving connection checkpoints', async () => {
    // A restart size of 100 frames; the worker notices a larger WAL within its 100 ms interval.
    const small = await openDatabase(`sqlite:${join(dir, 'restart.sqlite')}`, { walRestartFrames: 100 });
    const wal = join(dir, 'restart.sqlite-wal');
    let largest = 0;
    let written = 0;
    try {
      // Back to back, so that a PASSIVE checkpoint alone never catches up: each transaction
      // writes four or more frames, so 6,000 of them would grow the WAL to 24,000 frames or
      // more (98 MB) if it never started over.
      for (; written < 6000; written++) {
        await writeTransaction(small, (tx) =>
          tx
            .insertInto('pilot_leads')
            .values({ id: `lead_wal${written}`, email: 'a@example.com', company: 'c', monthly_decisions: '<1k', needs: 'x'.repeat(1000), source: '127.0.0.1', created_at: new Date().toISOString() })
            .execute(),
        );
        if (written % 50 === 0) largest = Math.max(largest, statSync(wal).size);
      }
    } finally {
      await small.close();
    }
    expect(largest).toBeLessThan(30_000_000);
  }, 60_000);

  it('a checkpointer that stops is reported once, and commits checkpoint the WAL themselves from then on', async () => {
    const file = join(dir, 'lost.sqlite');
    // A driver the worker cannot load: the worker fails at start, as it would on any error of its own.
    const lost = await openDatabase(`sqlite:${file}`, { checkpointerDriver: join(dir, 'no-such-driver.js') });
    try {
      const reported = await new Promise<Error[]>((done) => {
        const errors: Error[] = [];
        lost.wal!.onCheckpointerLost((err) => errors.push(err));
        setTimeout(() => done(errors), 1000);
      });
      expect(reported).toHaveLength(1);
      expect(reported[0]!.message).toMatch(/no-such-driver/);
      // SQLite's own automatic checkpoint is back at its default of 1,000 pages (the serving
      // connection had set it far higher while the worker did the work).
      const { rows } = await sql<{ wal_autocheckpoint: bigint }>`pragma wal_autocheckpoint`.execute(lost.db);
      expect(Number(rows[0]!.wal_autocheckpoint)).toBe(1000);
      await writeTransaction(lost, (tx) =>
        tx
          .insertInto('pilot_leads')
          .values({ id: 'lead_lost', email: 'a@example.com', company: 'c', monthly_decisions: '<1k', needs: 'checkpointer lost', source: '127.0.0.1', created_at: new Date().toISOString() })
          .execute(),
      );
    } finally {
      await lost.close();
    }
  });
});
