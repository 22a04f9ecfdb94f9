import { describe, expect, it } from 'vitest';
import { numberWithFraction, repeatsMemberName } from '../../src/platform/json-members.js';

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

describe('numberWithFraction', () => {
  it.each([
    ['{}'],
    ['{"a":1,"b":-0,"c":[0,10,123456789],"d":true,"e":false,"f":null}'],
    ['{"amount":"12.50","note":"1e5 and 2.0","x\\\\":"a.b","e":"\\\\","q":"\\"3.5\\""}'],
    ['{"t":true,"f":false , "n" : 3 }'],
    ['"1.5"'],
    ['42'],
  ])('%s holds only whole numbers in digits', (text) => {
    JSON.parse(text); // every case is valid JSON
    expect(numberWithFraction(text)).toBeUndefined();
  });

  it.each([
    ['{"maxRepeats":0.99999999999999999}', '0.99999999999999999'],
    ['{"a":"1.5","n":1.0}', '1.0'],
    ['{"n":1e2}', '1e2'],
    ['{"n":1E+2}', '1E+2'],
    ['{"n":-0.0}', '-0.0'],
    ['[1,2,3.5]', '3.5'],
    ['{"s":"say \\"hi\\"","n":2.5e-3}', '2.5e-3'],
    ['7.5', '7.5'],
  ])('%s: finds %s', (text, token) => {
    JSON.parse(text); // every case is valid JSON
    expect(numberWithFraction(text)).toBe(token);
  });
});
