// A paid report's receipt is stored signed. Once its key is withdrawn (it leaked) the JWKS no longer
// lists it, so the stored receipt would never verify again: a payer who replays the payment or
// recovers the order after a restart gets the same receipt signed by the current key instead.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withdrawReceiptKey } from '../../src/platform/receipts.js';
import { verifyReceiptWithCli } from '../helpers/receipt-cli.js';
import { postJson, recordingPayingFetch, startPaidStack, type PaidStack } from '../helpers/paid.js';

let s: PaidStack;
beforeAll(async () => {
  s = await startPaidStack();
});
afterAll(async () => {
  await s?.close();
});

const jwksOf = async (stack: PaidStack) => (await fetch(`${stack.url}/.well-known/jwks.json`)).json();

describe('a paid receipt whose key was withdrawn', () => {
  it('is re-signed by the current key on a replay and on a recovery, and verifies with the JWKS alone', async () => {
    const { fetch: pay, signatures } = recordingPayingFetch(s, 1);
    const first = await pay(`${s.url}/api/quick-check`);
    expect(first.status).toBe(200);
    const report = await first.json();
    const leaked = report.receipt.keyId as string;

    const created = await postJson(`${s.url}/api/orders`, { path: '/api/quick-check', input: {} });
    const order = (await created.json()) as { id: string; key: string };
    const ordered = await recordingPayingFetch(s, 2).fetch(`${s.url}/api/quick-check`, { headers: { 'report-id': order.id, 'recovery-key': order.key } });
    expect(ordered.status).toBe(200);
    expect((await ordered.json()).receipt.keyId).toBe(leaked);
    const charged = await s.balanceOf(s.payTo);

    expect(await withdrawReceiptKey(s.t.database, leaked)).toMatchObject({ kid: leaked });
    const restarted = await startPaidStack({ devnet: s.devnet, database: s.t.database });
    try {
      const jwks = await jwksOf(restarted);
      const fresh = jwks.keys[0].kid as string;
      expect(jwks.keys.map((k: { kid: string }) => k.kid)).toEqual([fresh]);
      expect(fresh).not.toBe(leaked);

      const replayed = await fetch(`${restarted.url}/api/quick-check`, { headers: { 'payment-signature': signatures[0]! } });
      expect(replayed.status).toBe(200);
      const again = await replayed.json();
      const { receipt: stored, ...storedReport } = report;
      const { receipt, ...againReport } = again;
      expect(againReport).toEqual(storedReport);
      // The same receipt (id, subject, time of issue), signed by the key the JWKS lists.
      expect(receipt).toMatchObject({ receiptId: stored.receiptId, subject: stored.subject, issuedAt: stored.issuedAt, keyId: fresh });
      expect((await verifyReceiptWithCli(again, jwks)).code).toBe(0);
      expect((await verifyReceiptWithCli(report, jwks)).code).not.toBe(0);

      const recovered = await postJson(`${restarted.url}/api/orders/recover`, { id: order.id, key: order.key });
      expect(recovered.status).toBe(200);
      const restored = await recovered.json();
      expect(restored.receipt.keyId).toBe(fresh);
      expect((await verifyReceiptWithCli(restored, jwks)).code).toBe(0);
      // Two reads, one receipt: re-signing is deterministic, and nothing was charged again.
      const recoveredAgain = await (await postJson(`${restarted.url}/api/orders/recover`, { id: order.id, key: order.key })).json();
      expect(recoveredAgain).toEqual(restored);
      expect(await s.balanceOf(s.payTo)).toBe(charged);
    } finally {
      await restarted.close();
    }
  });
});
