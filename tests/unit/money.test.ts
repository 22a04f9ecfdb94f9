import { describe, expect, it } from 'vitest';
import {
  AMOUNT_PATTERN,
  CANONICAL_AMOUNT_PATTERN,
  MAX_MICRO_USDC,
  formatUsdc,
  isAmount,
  parseUsdc,
} from '../../src/platform/money.js';

describe('parseUsdc', () => {
  it.each([
    ['0', 0n],
    ['0.0', 0n],
    ['1', 1_000_000n],
    ['1.5', 1_500_000n],
    ['12.345678', 12_345_678n],
    ['0.000001', 1n],
    ['1.000000', 1_000_000n],
    ['1.000001', 1_000_001n],
    ['0.25', 250_000n],
    ['999999999999', 999_999_999_999_000_000n],
    ['999999999999.999999', 999_999_999_999_999_999n],
  ])('reads %j as %s micro-USDC', (text, micro) => {
    expect(parseUsdc(text)).toBe(micro);
    expect(isAmount(text)).toBe(true);
  });

  it('accepts at most six fractional digits: a seventh is rejected, never rounded', () => {
    expect(parseUsdc('0.123456')).toBe(123_456n);
    expect(() => parseUsdc('0.1234567')).toThrow(RangeError);
    expect(() => parseUsdc('0.0000001')).toThrow(RangeError);
    expect(() => parseUsdc('1.0000000')).toThrow(RangeError);
    // The schema pattern must draw the same line, or a seventh digit passes validation and then
    // fails in parsing (a 500 where the caller is owed a 400).
    expect(isAmount('0.123456')).toBe(true);
    for (const t of ['0.1234567', '0.0000001', '1.0000000']) expect(isAmount(t)).toBe(false);
  });

  it('reads leading zeros in the integer part as the same value', () => {
    expect(parseUsdc('007')).toBe(7_000_000n);
    expect(parseUsdc('00.5')).toBe(500_000n);
    expect(parseUsdc('000000000001')).toBe(1_000_000n);
  });

  it('accepts 12 integer digits and rejects 13', () => {
    expect(parseUsdc('100000000000')).toBe(100_000_000_000_000_000n);
    expect(() => parseUsdc('1000000000000')).toThrow(RangeError);
    expect(() => parseUsdc('9999999999999.5')).toThrow(RangeError);
    // 13 digits only because of a leading zero are still 13 digits
    expect(() => parseUsdc('0100000000000')).toThrow(RangeError);
    // The pattern the request schemas validate with draws the same line.
    expect(isAmount('100000000000')).toBe(true);
    expect(isAmount('1000000000000')).toBe(false);
    expect(isAmount('1000000000000.5')).toBe(false);
  });

  it('MAX_MICRO_USDC is the largest parseable amount', () => {
    expect(parseUsdc('999999999999.999999')).toBe(MAX_MICRO_USDC);
  });

  it.each([
    ['empty', ''],
    ['exponent', '1e3'],
    ['upper-case exponent', '1E3'],
    ['exponent with fraction', '1.5e-3'],
    ['minus sign', '-1'],
    ['negative zero', '-0'],
    ['plus sign', '+1'],
    ['leading space', ' 1'],
    ['trailing space', '1 '],
    ['tab', '\t1'],
    ['trailing newline', '1\n'],
    ['leading newline', '\n1'],
    ['non-breaking space', '1\u00a0'],
    ['comma decimal separator', '1,5'],
    ['thousands separator', '1,000'],
    ['underscore separator', '1_000'],
    ['bare fraction', '.5'],
    ['trailing dot', '1.'],
    ['two dots', '1.2.3'],
    ['hex', '0x10'],
    ['Infinity', 'Infinity'],
    ['NaN', 'NaN'],
    ['letters', 'abc'],
    ['Arabic-Indic digit', '\u0661'],
    ['Arabic-Indic amount', '\u0661\u066b\u0665'],
    ['Extended Arabic-Indic digits', '\u06f1\u06f2'],
    ['Devanagari digit', '\u0967'],
    ['full-width digits', '\uff11\uff12'],
    ['full-width digit with ASCII fraction', '\uff11.5'],
    ['mathematical bold digit', '\u{1d7cf}'],
    ['superscript digit', '\u00b9'],
    ['ASCII digits with a full-width fraction', '1.\uff15'],
    // The code points right next to '0' and '9': a digit test off by one would read ':' as ten.
    ['colon after the integer digits', '1:'],
    ['colon in the fraction', '1.5:'],
    ['slash after the integer digits', '1/'],
    ['slash in the fraction', '1.5/'],
  ])('rejects %s (%j)', (_name, text) => {
    expect(isAmount(text)).toBe(false);
    expect(() => parseUsdc(text)).toThrow(RangeError);
  });

  it('agrees with AMOUNT_PATTERN and exact decimal arithmetic on 20,000 random strings', () => {
    // A reference built the slow, obvious way: the pattern decides, BigInt of the digits computes.
    const reference = (t: string): bigint | undefined => {
      if (!new RegExp(AMOUNT_PATTERN).test(t)) return undefined;
      const [w = '0', f = ''] = t.split('.');
      return BigInt(w) * 1_000_000n + BigInt(f.padEnd(6, '0'));
    };
    const alphabet = '0123456789999.-+e ';
    let seed = 42;
    const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31);
    for (let k = 0; k < 20_000; k++) {
      let t = '';
      const len = next() % 22;
      for (let c = 0; c < len; c++) t += alphabet[next() % alphabet.length];
      const want = reference(t);
      if (want === undefined) expect(() => parseUsdc(t), JSON.stringify(t)).toThrow(RangeError);
      else expect(parseUsdc(t), JSON.stringify(t)).toBe(want);
    }
  });

  it('rejects values that are not strings', () => {
    for (const v of [1, 1.5, 1n, null, undefined, {}, ['1']]) {
      expect(isAmount(v)).toBe(false);
      expect(() => parseUsdc(v as unknown as string)).toThrow(RangeError);
    }
  });
});

describe('formatUsdc', () => {
  it.each([
    [0n, '0'],
    [1n, '0.000001'],
    [10n, '0.00001'],
    [250_000n, '0.25'],
    [1_000_000n, '1'],
    [1_500_000n, '1.5'],
    [12_345_678n, '12.345678'],
    [100_000_000n, '100'],
    [MAX_MICRO_USDC, '999999999999.999999'],
  ])('writes %s micro-USDC as %j', (micro, text) => {
    expect(formatUsdc(micro)).toBe(text);
  });

  it('rejects a negative amount', () => {
    expect(() => formatUsdc(-1n)).toThrow(RangeError);
  });

  it('writes the canonical form: no leading zeros, no trailing fractional zeros', () => {
    expect(formatUsdc(parseUsdc('007.500000'))).toBe('7.5');
    expect(formatUsdc(parseUsdc('0.100'))).toBe('0.1');
    expect(formatUsdc(parseUsdc('10.0'))).toBe('10');
    expect(formatUsdc(parseUsdc('000'))).toBe('0');
  });
});

describe('round trips', () => {
  const samples = [0n, 1n, 9n, 10n, 99n, 999_999n, 1_000_000n, 1_000_001n, 123_456_789n, 10n ** 17n, MAX_MICRO_USDC - 1n, MAX_MICRO_USDC];

  it('parseUsdc(formatUsdc(n)) === n', () => {
    for (const n of samples) expect(parseUsdc(formatUsdc(n))).toBe(n);
  });

  it('formatUsdc output is always an amount in canonical form', () => {
    const canonical = new RegExp(CANONICAL_AMOUNT_PATTERN);
    const plain = new RegExp(AMOUNT_PATTERN);
    for (const n of samples) {
      const s = formatUsdc(n);
      expect(s).toMatch(canonical);
      expect(s).toMatch(plain);
    }
  });

  it('formatUsdc(parseUsdc(s)) is s for canonical strings', () => {
    for (const s of ['0', '0.000001', '0.5', '1', '1.25', '42.123456', '999999999999.999999']) {
      expect(formatUsdc(parseUsdc(s))).toBe(s);
    }
  });
});

describe('amount patterns', () => {
  it('the canonical pattern refuses leading zeros that the plain pattern accepts', () => {
    const canonical = new RegExp(CANONICAL_AMOUNT_PATTERN);
    expect(canonical.test('0')).toBe(true);
    expect(canonical.test('0.5')).toBe(true);
    expect(canonical.test('10.000001')).toBe(true);
    expect(canonical.test('01')).toBe(false);
    expect(canonical.test('00.5')).toBe(false);
    expect(canonical.test('1.0000001')).toBe(false);
    expect(isAmount('01')).toBe(true);
  });

  it('the patterns hold under the unicode flag that ajv compiles them with', () => {
    for (const p of [AMOUNT_PATTERN, CANONICAL_AMOUNT_PATTERN]) {
      const re = new RegExp(p, 'u');
      expect(re.test('1.5')).toBe(true);
      expect(re.test('\uff11')).toBe(false);
      expect(re.test('\u0661')).toBe(false);
      expect(re.test('1\n')).toBe(false);
    }
  });
});
