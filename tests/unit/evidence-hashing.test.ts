import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { eventHash, intentDigestOf, linkEvent, nextLink, normaliseIntent, type Intent } from '../../src/features/evidence/hashing.js';

const sha = (s: string) => `sha256:${createHash('sha256').update(s).digest('hex')}`;
const POLICY = `sgp_${'a'.repeat(32)}`;
const intent: Intent = {
  policyId: POLICY,
  agentId: 'agent-7',
  requestId: 'r-1',
  chain: 'base',
  asset: 'USDC',
  recipient: '0xAbCdEf0123456789aBcDeF0123456789AbCdEf01',
  amount: '12.500',
};

describe('intent digest', () => {
  it('normalises addresses to lower case and the amount to canonical decimal, leaving expectedFrom out when absent', () => {
    expect(normaliseIntent(intent)).toEqual({ ...intent, recipient: intent.recipient.toLowerCase(), amount: '12.5' });
    expect('expectedFrom' in normaliseIntent(intent)).toBe(false);
    expect(normaliseIntent({ ...intent, expectedFrom: '0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF' }).expectedFrom).toBe(`0x${'f'.repeat(40)}`);
    expect(normaliseIntent({ ...intent, amount: '0.000000' }).amount).toBe('0');
  });

  it('is sha256 over the RFC 8785 JSON of the normalised intent, byte for byte', () => {
    const canonical = `{"agentId":"agent-7","amount":"12.5","asset":"USDC","chain":"base","policyId":"${POLICY}","recipient":"${intent.recipient.toLowerCase()}","requestId":"r-1"}`;
    expect(intentDigestOf(intent)).toBe(sha(canonical));
  });

  it('does not depend on spelling or key order, and changes with any material field', () => {
    const reordered = Object.fromEntries(Object.entries(intent).reverse()) as unknown as Intent;
    expect(intentDigestOf(reordered)).toBe(intentDigestOf({ ...intent, amount: '12.5', recipient: intent.recipient.toUpperCase().replace('0X', '0x') }));
    for (const change of [{ amount: '12.51' }, { requestId: 'r-2' }, { agentId: 'x' }, { expectedFrom: intent.recipient }]) {
      expect(intentDigestOf({ ...intent, ...change })).not.toBe(intentDigestOf(intent));
    }
  });

  it('escapes strings as RFC 8785 does (non-ASCII kept, control characters escaped)', () => {
    const odd = { ...intent, requestId: 'é\n"' };
    const canonical = `{"agentId":"agent-7","amount":"12.5","asset":"USDC","chain":"base","policyId":"${POLICY}","recipient":"${intent.recipient.toLowerCase()}","requestId":"é\\n\\""}`;
    expect(intentDigestOf(odd)).toBe(sha(canonical));
  });
});

describe('event hash', () => {
  const chainId = `ec_${'b'.repeat(32)}`;
  const event = {
    evidenceId: `ev_${'c'.repeat(32)}`,
    sequence: 1,
    eventType: 'SETTLEMENT_RECONCILED' as const,
    body: { txHash: '0xab', result: 'MATCH', confirmations: 2, mismatches: [] },
    createdAt: '2026-01-15T12:00:00.000Z',
    prevHash: 'sha256:00',
  };

  it('covers exactly { evidenceChainId, evidenceId, sequence, eventType, body, createdAt, prevHash } in RFC 8785 form', () => {
    const preimage =
      `{"body":{"confirmations":2,"mismatches":[],"result":"MATCH","txHash":"0xab"},"createdAt":"2026-01-15T12:00:00.000Z",` +
      `"eventType":"SETTLEMENT_RECONCILED","evidenceChainId":"${chainId}","evidenceId":"${event.evidenceId}","prevHash":"sha256:00","sequence":1}`;
    expect(eventHash(chainId, event)).toBe(sha(preimage));
  });

  it('changes with every member, including the chain it belongs to', () => {
    const base = eventHash(chainId, event);
    expect(eventHash(`ec_${'d'.repeat(32)}`, event)).not.toBe(base);
    for (const change of [{ sequence: 2 }, { prevHash: 'sha256:01' }, { createdAt: '2026-01-15T12:00:00.001Z' }, { body: { ...event.body, confirmations: 3 } }, { evidenceId: 'ev_x' }]) {
      expect(eventHash(chainId, { ...event, ...change })).not.toBe(base);
    }
  });

  it('links the first event to the intent digest and every later one to the previous hash', () => {
    expect(nextLink('sha256:intent', undefined)).toEqual({ sequence: 1, prevHash: 'sha256:intent' });
    const first = linkEvent(chainId, 'sha256:intent', undefined, { evidenceId: 'ev_1', eventType: 'PRECHECK_COMPLETED', body: {}, createdAt: event.createdAt });
    const second = linkEvent(chainId, 'sha256:intent', first, { evidenceId: 'ev_2', eventType: 'SETTLEMENT_RECONCILED', body: {}, createdAt: event.createdAt });
    expect(first).toMatchObject({ sequence: 1, prevHash: 'sha256:intent' });
    expect(second).toMatchObject({ sequence: 2, prevHash: first.hash });
    expect(second.hash).toBe(eventHash(chainId, second));
  });
});
