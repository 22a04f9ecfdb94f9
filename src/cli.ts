import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseConfig } from './config.js';
import { evidenceVerifyCommand, receiptVerifyCommand } from './features/evidence/verify-command.js';
import { purgeExpired } from './features/maintenance.js';
import { PolicyStore, toPolicy, type PolicyRow } from './features/spend-policy/policies.js';
import { backupSqlite, openDatabase, sqliteFileOf, type Database } from './platform/db/database.js';
import { NotCurrentSchema } from './platform/db/migrations.js';
import { forgetGeneratedKey, withdrawReceiptKey } from './platform/receipts.js';

const USAGE = `usage: paywarden <command>

Operator commands; they act on the database named by DATABASE_URL (default sqlite:./data/paywarden.sqlite,
relative to the current directory), which must exist with this version's schema: they never create
one nor change its schema.

  policy show <policyId>                     print a policy (never its key hashes)
  policy direct-checks <policyId> on|off     turn direct evidence checks (preflight, settlement) on or off
  policy admin-key <policyId>                issue a new admin key for a policy whose administrator lost
                                             theirs (or had it taken); prints it once, the old one stops working
  purge                                      delete data past its retention (pilot policies, leads, recovery orders)
  backup <file>                              SQLite: copy the database, while the service runs, into a new
                                             file (mode 0600; an existing file is an error). PostgreSQL: use pg_dump
  receipt-key withdraw <kid>                 withdraw a receipt signing key that leaked: the JWKS stops
                                             listing it and no start publishes it again; if it is the
                                             generated key, it is deleted and the next start makes a new
                                             one; a RECEIPT_SIGNING_KEY naming it stops the start.
                                             Restart every instance afterwards
  receipt-key forget-generated               delete the private receipt key the service generated before
                                             RECEIPT_SIGNING_KEY was set (its public key stays published, so its
                                             receipts still verify). Only once every instance runs with
                                             RECEIPT_SIGNING_KEY: one without it would generate a new key

Audit commands; they need no database.

  evidence verify <chain.json> --jwks <file|url>
                                             recompute the intent digest and every event hash of a
                                             chain read from the API and verify its signed receipts;
                                             exit code 1 when anything does not verify, 3 when the
                                             chain or the JWKS cannot be read
  receipt verify <answer.json> --jwks <file|url>
                                             verify the receipt of a saved answer: a decision's
                                             ({ decision, receipt }) or a paid report's; exit code 1
                                             when it does not verify, 3 when it cannot be checked
`;

type Out = { log: (s: string) => void; error: (s: string) => void };

/** Runs one CLI command; returns the process exit code. */
export async function run(argv: string[], out: Out = { log: console.log, error: console.error }, env = process.env): Promise<number> {
  const [cmd, sub, ...rest] = argv;
  if (!cmd || cmd === 'help' || cmd === '--help' || cmd === '-h') {
    out.log(USAGE);
    return cmd ? 0 : 2;
  }
  if (cmd === 'evidence' && sub === 'verify') return evidenceVerifyCommand(rest, out);
  if (cmd === 'receipt' && sub === 'verify') return receiptVerifyCommand(rest, out);
  let database: Database | undefined;
  const db = async () => (database ??= await openExisting(parseConfig(env).databaseUrl));
  try {
    if (cmd === 'policy' && sub === 'show' && rest.length === 1) {
      const row = await new PolicyStore(await db()).get(rest[0]!);
      if (!row) return fail(out, `no policy ${rest[0]}`);
      out.log(JSON.stringify({ ...toPolicy(row), purgedAt: row.purged_at }, null, 2));
      return 0;
    }
    if (cmd === 'policy' && sub === 'admin-key' && rest.length === 1) {
      const { store, row, now } = await livePolicy(await db(), rest[0]!);
      const adminKey = await store.rotateAdminKey(row, now);
      if (!adminKey) return fail(out, `the admin key of ${rest[0]} changed meanwhile (or its access ended just now); nothing changed, run it again`);
      out.log(JSON.stringify({ policyId: row.id, adminKey }, null, 2));
      return 0;
    }
    if (cmd === 'policy' && sub === 'direct-checks' && rest.length === 2 && (rest[1] === 'on' || rest[1] === 'off')) {
      const { store, row, now } = await livePolicy(await db(), rest[0]!);
      // The policy was purged (or its access ended) since it was read: the write matched nothing.
      if (!(await store.setDirectChecks(row.id, rest[1] === 'on', now))) return fail(out, `policy ${rest[0]} is no longer accessible (purged or pilot access ended just now); nothing changed`);
      out.log(`direct checks ${rest[1]} for ${rest[0]}`);
      return 0;
    }
    if (cmd === 'receipt-key' && sub === 'withdraw' && rest.length === 1) {
      const withdrawal = await withdrawReceiptKey(await db(), rest[0]!);
      if (!withdrawal) return fail(out, `no receipt key ${rest[0]} is published or kept; nothing changed (kid as listed in /.well-known/jwks.json)`);
      out.log(
        `receipt key ${rest[0]} withdrawn${withdrawal.generatedKeyDeleted ? '; it was the generated key, deleted: the next start generates another' : ''}; restart every instance`,
      );
      return 0;
    }
    if (cmd === 'backup' && sub !== undefined && rest.length === 0) {
      const url = parseConfig(env).databaseUrl;
      const file = sqliteFileOf(url);
      if (file === undefined) return fail(out, 'backup copies an SQLite database; back up PostgreSQL with pg_dump');
      await (await db()).close(); // the service's database, with this version's schema
      database = undefined;
      await backupSqlite(file, sub);
      out.log(`backed up ${resolve(file)} to ${resolve(sub)}`);
      return 0;
    }
    if (cmd === 'receipt-key' && sub === 'forget-generated' && rest.length === 0) {
      const kid = await forgetGeneratedKey(await db());
      out.log(kid ? `generated receipt key ${kid} deleted; its public key stays published` : 'no generated receipt key is kept; nothing changed');
      return 0;
    }
    if (cmd === 'purge' && sub === undefined) {
      out.log(JSON.stringify(await purgeExpired(await db(), new Date())));
      return 0;
    }
    out.error(USAGE);
    return 2;
  } catch (err) {
    return fail(out, err instanceof Error ? err.message : String(err));
  } finally {
    await database?.close();
  }
}

/**
 * A policy an operator command may change: one that exists and whose pilot access has not ended
 * (its endpoints answer 410, so a change would serve nobody). Throws the message to print.
 */
async function livePolicy(database: Database, policyId: string): Promise<{ store: PolicyStore; row: PolicyRow; now: Date }> {
  const store = new PolicyStore(database);
  const now = new Date();
  const row = await store.get(policyId);
  if (!row) throw new Error(`no policy ${policyId}`);
  if (row.purged_at || now.toISOString() >= row.access_expires_at) {
    throw new Error(`policy ${policyId} is no longer accessible (pilot access ended ${row.access_expires_at}); nothing changed`);
  }
  return { store, row, now };
}

/**
 * The service's database, never a new one, nor a new schema in another: opening an SQLite URL
 * creates its file, and migrating whatever DATABASE_URL names would turn a wrong one (run from
 * another directory, another application's database, a PostgreSQL URL without the service's
 * search_path) into an empty paywarden database, in which every policy reads as unknown and a
 * purge finds nothing, and says so with exit code 0.
 */
async function openExisting(url: string): Promise<Database> {
  const file = sqliteFileOf(url);
  const where = file === undefined ? '' : ` at ${resolve(file)}`;
  const hint = "set DATABASE_URL to the service's database, or run from the directory the service runs in";
  if (file !== undefined && !existsSync(file)) throw new Error(`no database${where} (DATABASE_URL=${url}); ${hint}`);
  try {
    return await openDatabase(url, { existingOnly: true });
  } catch (err) {
    if (!(err instanceof NotCurrentSchema)) throw err;
    throw new Error(`not the service's database${where}: ${err.message}; ${hint}`);
  }
}

function fail(out: Out, message: string): number {
  out.error(`paywarden: ${message}`);
  return 1;
}
