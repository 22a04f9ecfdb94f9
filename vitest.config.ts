import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

// The whole suite runs on SQLite always, and again on PostgreSQL when TEST_DATABASE_URL is set.
// Pure-rule tests (tests/unit) and the chain stack (tests/devnet) touch no database, so they run
// once; tests/paid drives the payment pipeline, whose storage matters, so it runs on both.
const shared = { include: ['tests/**/*.test.ts'], testTimeout: 60_000, hookTimeout: 120_000 };

// Test files run two at a time at least. Most of a file's time is spent waiting (for anvil, the
// databases, fsync, a facilitator), so on the 2-core machines CI runs on, vitest's default of one
// worker (cores - 1) left a core idle: the suite took 10.5 minutes with one worker, 5.7 with two.
// Every test file has its own database (a PostgreSQL schema or an SQLite file), ports and Redis
// key prefix, so files never share state.
const maxWorkers = Math.max(2, availableParallelism() - 1);

export default defineConfig({
  test: {
    maxWorkers,
    projects: [
      { test: { ...shared, name: 'sqlite', env: { PAYWARDEN_TEST_DB: 'sqlite' } } },
      ...(process.env.TEST_DATABASE_URL
        ? [{ test: { ...shared, name: 'postgres', globalSetup: ['tests/pg-run.ts'], exclude: ['tests/unit/**', 'tests/devnet/**'], env: { PAYWARDEN_TEST_DB: 'postgres' } } }]
        : []),
    ],
  },
});
