import { describe, expect, it } from 'vitest';
import { addDecimals, compareDecimals, decimalFromNumber, normalizeDecimal } from '../../src/platform/market/decimal.js';
import { byLiquidityDesc } from '../../src/platform/market/normalize.js';

describe('market decimals (exact, no float arithmetic)', () => {
  it.each([
    ['0', '0'],
    ['-0.000', '0'],
    ['007.50', '7.5'],
    ['12190977949165548.0', '12190977949165548'],
    ['0.0000012345', '0.0000012345'],
    ['1.5e-7', '0.00000015'],
    ['1.2E+3', '1200'],
    ['-3.25', '-3.25'],
    ['123456789012345678901234567890.000000000000000001', '123456789012345678901234567890.000000000000000001'],
  ])('normalizes %s to %s', (input, out) => {
    expect(normalizeDecimal(input)).toBe(out);
  });

  it.each(['', '1.', '.5', '1,5', '0x10', 'NaN', 'Infinity', ' 1', '1e', '1e1234', '--1', '+1'])('rejects %j', (input) => {
    expect(normalizeDecimal(input)).toBeNull();
  });

  it('reads a JSON number at its shortest round-trip text', () => {
    expect(decimalFromNumber(11736.84509609765)).toBe('11736.84509609765');
    expect(decimalFromNumber(1e-7)).toBe('0.0000001');
    expect(decimalFromNumber(1.2e21)).toBe('1200000000000000000000');
    expect(decimalFromNumber(0.1)).toBe('0.1');
    expect(decimalFromNumber(Number.NaN)).toBeNull();
  });

  it('adds exactly where floats would not', () => {
    expect(0.1 + 0.2).not.toBe(0.3);
    expect(addDecimals(['0.1', '0.2'])).toBe('0.3');
    expect(addDecimals(['10000.5', '5000'])).toBe('15000.5');
    expect(addDecimals(['99999999999999999999.99', '0.01'])).toBe('100000000000000000000');
    expect(addDecimals([])).toBe('0');
    expect(addDecimals(['-1.5', '1.5'])).toBe('0');
  });

  it('compares exactly', () => {
    expect(compareDecimals('0.30000000000000004', '0.3')).toBe(1);
    expect(compareDecimals('2', '10')).toBe(-1);
    expect(compareDecimals('1.50', '1.5')).toBe(0);
    expect(compareDecimals('-2', '1')).toBe(-1);
  });

  it('orders pairs by liquidity, unknown liquidity last, stable among equals', () => {
    const pairs = [
      { id: 'a', liquidityUsd: null },
      { id: 'b', liquidityUsd: '9.99' },
      { id: 'c', liquidityUsd: '10' },
      { id: 'd', liquidityUsd: '9.99' },
    ];
    expect(byLiquidityDesc(pairs).map((p) => p.id)).toEqual(['c', 'b', 'd', 'a']);
  });
});
