import { Type } from 'typebox';
import { Address, Chain } from '../../platform/schemas.js';

export const HEX_DATA_PATTERN = '^0x([0-9a-fA-F]{2})*$';
export const TX_HASH_PATTERN = '^0x[0-9a-fA-F]{64}$';

/** Body of the paid transaction preflight (and of the evidence-chain preflight attachment). */
export const PreflightRequest = Type.Object(
  {
    chain: Chain,
    to: Address('Destination of the unsigned transaction'),
    from: Type.Optional(Address('Sender used for the simulation')),
    valueWei: Type.Optional(Type.String({ pattern: '^[0-9]{1,78}$', description: 'Native value in wei, digits only' })),
    data: Type.Optional(Type.String({ pattern: HEX_DATA_PATTERN, maxLength: 60000, description: 'Unsigned calldata: 0x and an even number of hex digits' })),
  },
  { additionalProperties: false },
);

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
