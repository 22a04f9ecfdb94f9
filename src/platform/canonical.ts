import { hash } from 'node:crypto';
import canonicalize from 'canonicalize';

/** RFC 8785 (JCS) canonical JSON: the one serialisation every digest and signature covers. */
export function canonicalJson(value: unknown): string {
  const out = (canonicalize as unknown as (v: unknown) => string | undefined)(value);
  if (out === undefined) throw new TypeError('value has no JSON form');
  return out;
}

/** One-shot hashing: about half the cost of a createHash object (a protected decision hashes three times). */
export function sha256Hex(data: string | Uint8Array): string {
  return hash('sha256', data, 'hex');
}

/** `sha256:<hex>` over the canonical JSON of `value`. */
export function digestOf(value: unknown): string {
  return `sha256:${sha256Hex(canonicalJson(value))}`;
}
