import { Type } from 'typebox';
import { Address, Chain } from '../../platform/schemas.js';

/** Body of token-preview, token-coverage and token-risk. */
export const TokenAddressRequest = Type.Object(
  { chain: Chain, address: Address('Base token contract address') },
  { additionalProperties: false },
);
