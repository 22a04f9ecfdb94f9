import type { TargetModule } from './types.js';

/**
 * Every benchmark target by name. Add a target by writing bench/targets/<name>.ts (default export
 * a TargetModule) and listing it here; `startTarget(name)` then runs it in its own process.
 * Targets are imported lazily so the parent (the load generator) never loads the service.
 */
export const TARGETS = {
  /** POST /api/spendpolicy/evaluate on the real service (buildApp, temporary SQLite). */
  evaluate: () => import('../targets/evaluate.js'),
  /** A bare Fastify 5 route: strict ajv body validation of a small object, echo. */
  bare: () => import('../targets/bare.js'),
  /** Bare Fastify validating the evaluate request schema and echoing it: what the payload alone costs (a reference). */
  'bare-evaluate-body': () => import('../targets/bare-evaluate-body.js'),
  /** POST /api/spendpolicy/decisions, durable (synchronous=FULL), a fresh requestId per request. */
  'decisions-sqlite': () => import('../targets/decisions-sqlite.js'),
  /** The same on PostgreSQL (BENCH_DATABASE_URL, default the local test database). */
  'decisions-postgres': () => import('../targets/decisions-postgres.js'),
  /** GET /api/quick-check without payment: the 402 challenge, against a devnet facilitator. */
  challenge: () => import('../targets/challenge.js'),
} satisfies Record<string, () => Promise<{ default: TargetModule }>>;

export type TargetName = keyof typeof TARGETS;

export function isTargetName(name: string): name is TargetName {
  return Object.hasOwn(TARGETS, name);
}
