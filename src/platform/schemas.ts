import { Type, type TSchema, type TUnsafe } from 'typebox';
import { isAddress } from 'viem';
import { AMOUNT_PATTERN } from './money.js';
import { ERROR_CODES, type ErrorCode } from './errors.js';

/** A string enum rendered as a plain JSON-schema `enum` (clearer in OpenAPI than anyOf of consts). */
export function StringEnum<const T extends readonly string[]>(values: T, options: Record<string, unknown> = {}): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options });
}

export const ADDRESS_PATTERN = '^0x[0-9a-fA-F]{40}$';
/** 0x and an even number of hex digits (calldata, signatures). */
export const HEX_DATA_PATTERN = '^0x([0-9a-fA-F]{2})*$';
/** 0x and 64 hex digits: a transaction hash, an EIP-3009 nonce. */
export const BYTES32_PATTERN = '^0x[0-9a-fA-F]{64}$';
/** A uint256 in decimal digits (at most 78 of them). */
export const UINT256_DIGITS_PATTERN = '^[0-9]{1,78}$';
/**
 * The ajv format every address of a request carries, besides ADDRESS_PATTERN: a mixed-case
 * address is EIP-55 checksummed, and a checksum that does not match means a character was
 * mistyped, which must be refused rather than read as another address. All lower or all upper
 * case carries no checksum and passes. (A value the pattern refuses passes here, so that only the
 * pattern's error is reported.)
 */
export const ADDRESS_FORMAT = 'evm-address';
const ADDRESS_RE = new RegExp(ADDRESS_PATTERN);
export function checksumHolds(value: string): boolean {
  // viem's strict check passes all lower case and checks the checksum of mixed case.
  const hex = value.slice(2);
  return !ADDRESS_RE.test(value) || hex === hex.toUpperCase() || isAddress(value, { strict: true });
}
export const ADDRESS_FORMAT_MESSAGE = 'has an EIP-55 checksum that does not match (mixed case): a character is wrong; copy the address again from where it came from';
export const Address = (description = 'Base address: 0x followed by 40 hex characters; in mixed case, a valid EIP-55 checksum') =>
  Type.String({ pattern: ADDRESS_PATTERN, format: ADDRESS_FORMAT, description });
export const Amount = (description = 'USDC amount as a decimal string: up to 12 integer digits and at most 6 fractional digits') =>
  Type.String({ pattern: AMOUNT_PATTERN, description, examples: ['12.5'] });
/**
 * Text a client chooses (names, ids, notes): no NUL character and no lone UTF-16 surrogate.
 * PostgreSQL cannot store NUL (the statement fails), and node-postgres turns every lone surrogate
 * into U+FFFD, so two different strings would be stored as one while SQLite kept them apart.
 * (ajv compiles patterns with the u flag: a surrogate pair is one code point, outside the range.)
 */
export const TEXT_PATTERN = '^[^\\u0000\\ud800-\\udfff]*$';
export const Text = ({ description, ...options }: { minLength?: number; maxLength: number; description?: string }) =>
  Type.String({
    ...options,
    pattern: TEXT_PATTERN,
    description: [description, 'Unicode text without NUL characters or lone surrogates'].filter(Boolean).join('; '),
  });
export const Chain = StringEnum(['base'] as const, { description: 'Always the literal base' });
export const Asset = StringEnum(['USDC'] as const, { description: 'Always the literal USDC' });
export const DateTime = (description?: string) =>
  Type.String({ format: 'date-time', ...(description ? { description } : {}) });

export const Problem = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer(),
    code: Type.String({ description: 'Stable machine-readable error code' }),
    detail: Type.String({ description: 'What went wrong, for a person; always present' }),
    requestId: Type.String(),
    errors: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
    retryAfter: Type.Optional(Type.Integer({ description: 'Seconds to wait before retrying (429, and 503 shutting_down or storage_unavailable; also in Retry-After)' })),
  },
  { description: 'RFC 9457 problem body' },
);

/** The header of every 429, and of a 202 that asks the caller to come back. */
export const RetryAfterHeader = { 'Retry-After': { type: 'integer', description: 'Seconds to wait before asking again' } };

/**
 * Problem responses for the given statuses, each described by the codes that produce it. They are
 * sent as application/problem+json, which the OpenAPI document says (see openapi.ts).
 */
export function problems(...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {};
  for (const status of statuses) {
    const titles = (Object.keys(ERROR_CODES) as ErrorCode[])
      .filter((c) => ERROR_CODES[c].status === status)
      .map((c) => ERROR_CODES[c].title);
    out[status] = Type.Object(Problem.properties, { description: titles.join('; ') || 'Problem', ...(status === 429 ? { headers: RetryAfterHeader } : {}) });
  }
  return out;
}
