import { randomBytes, timingSafeEqual } from 'node:crypto';
import { sha256Hex } from './canonical.js';

export type KeyKind = 'admin' | 'agent';

const KEY_RE = /^sgp_(admin|agent)_[A-Za-z0-9_-]{43}$/;

/** A new secret: `sgp_admin_` or `sgp_agent_` and 43 base64url characters (32 random bytes). */
export function generateKey(kind: KeyKind): string {
  return `sgp_${kind}_${randomBytes(32).toString('base64url')}`;
}

/** Keys are stored only as this hash. */
export function hashKey(key: string): string {
  return sha256Hex(key);
}

export interface PresentedKey {
  kind: KeyKind;
  hash: string;
}

/** Reads `Authorization: Bearer <key>`; null when absent or not shaped like one of our keys. */
export function presentedKey(authorization: string | undefined): PresentedKey | null {
  if (!authorization) return null;
  const m = /^Bearer +([\x21-\x7e]+) *$/i.exec(authorization);
  const key = m?.[1];
  if (!key) return null;
  const kind = KEY_RE.exec(key)?.[1] as KeyKind | undefined;
  return kind ? { kind, hash: hashKey(key) } : null;
}

/** Constant-time comparison of two hex hashes. */
export function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && x.length > 0 && timingSafeEqual(x, y);
}
