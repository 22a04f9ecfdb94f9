import { describe, expect, it } from 'vitest';
import { AppError } from '../../src/platform/errors.js';
import { MAX_UINT256, checkPreflightRequest } from '../../src/features/reports/schemas.js';

describe('checkPreflightRequest: the one uint256 check of every preflight input', () => {
  it('accepts no value and values up to 2^256 - 1', () => {
    for (const valueWei of [undefined, '0', '1', MAX_UINT256.toString()]) expect(() => checkPreflightRequest({ valueWei })).not.toThrow();
  });

  it('refuses 2^256 and above as invalid_request naming where the value sits', () => {
    for (const valueWei of [(MAX_UINT256 + 1n).toString(), '9'.repeat(78)]) {
      const err = (() => {
        try {
          checkPreflightRequest({ valueWei }, 'body/input');
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(AppError);
      expect(err).toMatchObject({ code: 'invalid_request', status: 400, errors: [{ path: 'body/input/valueWei', message: 'must be at most 2^256 - 1' }] });
    }
  });
});
