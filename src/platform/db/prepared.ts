import { CompiledQuery, type Compilable, type QueryResult } from 'kysely';
import { registerHotStatement } from './database.js';
import type { Tx } from './tx.js';

const MARK = '\u0000paywarden-param:';

/**
 * A query written once with Kysely's builder and compiled once per database, then run many times
 * with new parameter values. Building and compiling a Kysely query costs far more than running a
 * prepared statement (on the protected-decision path it was most of the CPU time of a decision),
 * so the hot paths compile once: `build` gets named placeholders, stands them where values go,
 * and every run substitutes the values in their compiled positions.
 *
 * On PostgreSQL the compiled text is also sent as a named prepared statement (see
 * registerHotStatement), so the server parses and plans it once per connection.
 *
 * Only for queries whose shape never depends on the values (no `in (...)` lists of varying
 * length): that is checked at compile time, since every placeholder must appear in the SQL
 * parameters exactly where the builder put it.
 */
export function preparedQuery<N extends string, R>(
  names: readonly N[],
  build: (p: Record<N, never>) => Compilable<R>,
): (tx: Tx, args: Record<N, unknown>) => Promise<QueryResult<R>> {
  const placeholders = Object.fromEntries(names.map((n) => [n, `${MARK}${n}`])) as unknown as Record<N, never>;
  const compiled: CompiledQuery<R> = build(placeholders).compile();
  registerHotStatement(compiled.sql);
  type Slot = { kind: 'arg'; name: N } | { kind: 'const'; value: unknown };
  const slots = compiled.parameters.map((v): Slot =>
    typeof v === 'string' && v.startsWith(MARK) ? { kind: 'arg', name: v.slice(MARK.length) as N } : { kind: 'const', value: v },
  );
  const missing = names.filter((n) => !slots.some((s) => s.kind === 'arg' && s.name === n));
  if (missing.length) throw new Error(`prepared query does not use ${missing.join(', ')}: ${compiled.sql}`);
  return (tx, args) =>
    tx.executeQuery<R>({
      ...compiled,
      parameters: slots.map((s) => (s.kind === 'arg' ? args[s.name] : s.value)),
    });
}

/**
 * A query written as SQL text for one dialect (where the builder cannot say it, such as
 * PostgreSQL's `unnest` of array parameters), run like preparedQuery: on PostgreSQL as a named
 * prepared statement.
 */
export function preparedSql<R>(text: string): (tx: Tx, parameters: unknown[]) => Promise<QueryResult<R>> {
  registerHotStatement(text);
  return (tx, parameters) => tx.executeQuery<R>(CompiledQuery.raw(text, parameters));
}
