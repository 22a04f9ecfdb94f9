import { eventHash, intentDigestOf, type ChainEvent, type Intent } from '../../src/features/evidence/hashing.js';

interface ChainDocument {
  evidenceChainId: string;
  intent: Intent;
  intentDigest: string;
  events: Array<Omit<ChainEvent, 'hash'> & { hash: string }>;
  head?: { length: number; headHash: string };
}

/**
 * What anyone holding a chain's JSON can do after editing it: recompute every unkeyed hash, the
 * links between events, and the head's length and last hash. Only the signatures stay as they were.
 */
export function relink<D>(document: D): D {
  const d = document as unknown as ChainDocument;
  d.intentDigest = intentDigestOf(d.intent);
  let prev = d.intentDigest;
  d.events.forEach((e, i) => {
    e.sequence = i + 1;
    e.prevHash = prev;
    e.hash = eventHash(d.evidenceChainId, e);
    prev = e.hash;
  });
  if (d.head) d.head = { ...d.head, length: d.events.length, headHash: prev };
  return document;
}
