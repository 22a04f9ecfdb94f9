import { randomBytes } from 'node:crypto';

/** Identifier prefixes of DESIGN.md section 3: a type prefix and 32 lowercase hex characters. */
export type IdPrefix = 'sgp' | 'dec' | 'ec' | 'ev' | 'ord' | 'lead' | 'rcpt' | 'rpt';

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomBytes(16).toString('hex')}`;
}

export function idPattern(prefix: IdPrefix): string {
  return `^${prefix}_[0-9a-f]{32}$`;
}
