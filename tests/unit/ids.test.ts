import { describe, expect, it } from 'vitest';
import { idPattern, newId } from '../../src/platform/ids.js';

describe('newId', () => {
  it('gives the prefix and 32 hex characters, never the same id twice across many pool refills', () => {
    const pattern = new RegExp(idPattern('dec'));
    const seen = new Set<string>();
    for (let i = 0; i < 5_000; i++) {
      const id = newId('dec');
      expect(id).toMatch(pattern);
      seen.add(id.slice(4));
    }
    expect(seen.size).toBe(5_000);
  });
});
