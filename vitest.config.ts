import { defineConfig } from 'vitest/config';

// The whole suite runs on SQLite always, and again on PostgreSQL when TEST_DATABASE_URL is set.
// Pure-rule tests (tests/unit) and the chain stack (tests/devnet) touch no database, so they run
// once; tests/paid drives the payment pipeline, whose storage matters, so it runs on both.
const shared = { include: ['tests/**/*.test.ts'], testTimeout: 60_000, hookTimeout: 120_000 };

export default defineConfig({
  test: {
    projects: [
      { test: { ...shared, name: 'sqlite', env: { PAYWARDEN_TEST_DB: 'sqlite' } } },
      ...(process.env.TEST_DATABASE_URL
        ? [{ test: { ...shared, name: 'postgres', globalSetup: ['tests/pg-run.ts'], exclude: ['tests/unit/**', 'tests/devnet/**'], env: { PAYWARDEN_TEST_DB: 'postgres' } } }]
        : []),
    ],
  },
});
