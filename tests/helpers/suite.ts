import { afterAll, beforeAll } from 'vitest';

/**
 * Makes a fixture once for the enclosing describe block (beforeAll) and closes it after its
 * tests (afterAll). The returned object stands in for the fixture: each property read goes to
 * the fixture made by beforeAll, so tests use it like the fixture itself (`t.app`, `t.clock`).
 */
export function suiteFixture<T extends { close(): Promise<void> }>(create: () => Promise<T>, timeoutMs?: number): T {
  let current: T | undefined;
  beforeAll(async () => {
    current = await create();
  }, timeoutMs);
  afterAll(async () => {
    await current?.close();
  });
  return new Proxy({} as T, {
    get(_target, key) {
      if (!current) throw new Error(`suiteFixture: "${String(key)}" was read before beforeAll made the fixture`);
      const value: unknown = Reflect.get(current, key);
      return typeof value === 'function' ? value.bind(current) : value;
    },
  });
}
