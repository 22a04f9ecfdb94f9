import { Type } from 'typebox';
import { AppError } from '../../platform/errors.js';
import { Address, BYTES32_PATTERN, Chain, HEX_DATA_PATTERN, UINT256_DIGITS_PATTERN } from '../../platform/schemas.js';

export { HEX_DATA_PATTERN };
export const TX_HASH_PATTERN = BYTES32_PATTERN;

/** Body of the paid transaction preflight (and of the evidence-chain preflight attachment). */
export const PreflightRequest = Type.Object(
  {
    chain: Chain,
    to: Address('Destination of the unsigned transaction'),
    from: Type.Optional(Address('Sender used for the simulation')),
    valueWei: Type.Optional(Type.String({ pattern: UINT256_DIGITS_PATTERN, description: 'Native value in wei, digits only, at most 2^256 - 1 (a uint256; more is a 400)' })),
    data: Type.Optional(Type.String({ pattern: HEX_DATA_PATTERN, maxLength: 60000, description: 'Unsigned calldata: 0x and an even number of hex digits' })),
  },
  { additionalProperties: false },
);

export const MAX_UINT256 = 2n ** 256n - 1n;

/**
 * What PreflightRequest's schema cannot say: valueWei fits a uint256. Every place that accepts a
 * preflight input (the paid report, the evidence-chain attachment) runs this after the schema,
 * so the same body gets the same 400 everywhere. `at` is where the input sits in the request.
 */
export function checkPreflightRequest(input: { valueWei?: string | undefined }, at = 'body'): void {
  if (input.valueWei !== undefined && BigInt(input.valueWei) > MAX_UINT256) {
    const path = `${at}/valueWei`;
    throw new AppError('invalid_request', `${path}: must be at most 2^256 - 1`, { errors: [{ path, message: 'must be at most 2^256 - 1' }] });
  }
}

/** Body of the paid payment proof. */
export const PaymentProofRequest = Type.Object(
  {
    chain: Chain,
    txHash: Type.String({ pattern: TX_HASH_PATTERN, description: 'Transaction hash: 0x and 64 hex characters' }),
    expectedTo: Address('Expected USDC recipient'),
    expectedAmount: Type.String({ pattern: '^[0-9]{1,12}(\\.[0-9]{1,6})?$', description: 'Expected USDC amount: digits with an optional fraction of 1 to 6 digits' }),
    expectedFrom: Type.Optional(Address('Expected payer')),
  },
  { additionalProperties: false },
);
