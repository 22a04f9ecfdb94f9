import { describe, expect, it } from 'vitest';
import { repeatsMemberName } from '../../src/platform/json-members.js';

const check = (text: string) => repeatsMemberName(text, JSON.parse(text));

describe('repeatsMemberName', () => {
  it.each([
    ['{}'],
    ['[]'],
    ['"a:b"'],
    ['42'],
    ['null'],
    ['{"a":1,"b":{"a":1,"b":[{"a":1},{"a":2}]}}'],
    ['{ "a" : 1 ,\n\t"b"\r\n:\t2 }'],
    ['{"a":"x\\":y","b":"\\\\","c":"\\"\\\\\\":"}'],
    ['{"":1,"a":{"":2}}'],
    ['[{"a":1},{"a":1},[{"a":{"a":{}}}]]'],
    ['{"k":["a","b:",":c"],"l":"{\\"k\\":1,\\"k\\":2}"}'],
  ])('%s names no member twice', (text) => {
    expect(check(text)).toBe(false);
  });

  it.each([
    ['{"a":1,"a":2}'],
    ['{"a":1,"b":2,"a":1}'],
    ['{"p":{"x":1,"y":2,"x":3}}'],
    ['[{"a":1},{"b":1,"b":1}]'],
    ['{"a" :1, "a"\n:1}'],
    ['{"ab":1,"a\\u0062":2}'],
    ['{"a":{},"a":{"b":1}}'],
    ['{"amount":"1","agentId":"x","amount":"9"}'],
  ])('%s names a member twice', (text) => {
    expect(check(text)).toBe(true);
  });

  it('handles bodies nested thousands of levels deep without recursion', () => {
    const deep = `${'['.repeat(20_000)}{"a":1}${']'.repeat(20_000)}`;
    expect(check(deep)).toBe(false);
    const deepObjects = `${'{"a":'.repeat(5_000)}1${'}'.repeat(5_000)}`;
    expect(check(deepObjects)).toBe(false);
    expect(check(`${'{"a":'.repeat(5_000)}{"b":1,"b":2}${'}'.repeat(5_000)}`)).toBe(true);
  });
});
