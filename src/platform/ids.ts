import { randomFillSync } from 'node:crypto';

/** Identifier prefixes of DESIGN.md section 3: a type prefix and 32 lowercase hex characters. */
export type IdPrefix = 'sgp' | 'dec' | 'ec' | 'ev' | 'ord' | 'lead' | 'rcpt' | 'rpt';

/**
 * Random bytes for identifiers, drawn from the CSPRNG 4 KiB at a time: a separate
 * randomBytes(16) call per id cost several microseconds, and a protected decision makes two ids.
 * Each id takes 16 fresh bytes; none is ever handed out twice.
 */
const POOL = Buffer.alloc(4096);
let offset = POOL.length;

export function newId(prefix: IdPrefix): string {
  if (offset + 16 > POOL.length) {
    randomFillSync(POOL);
    offset = 0;
  }
  const id = POOL.toString('hex', offset, offset + 16);
  offset += 16;
  return `${prefix}_${id}`;
}

export function idPattern(prefix: IdPrefix): string {
  return `^${prefix}_[0-9a-f]{32}$`;
}
