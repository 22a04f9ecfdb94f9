// A PAYMENT-SIGNATURE header that is not an x402 v2 exact EIP-3009 payment is refused as a
// payment the facilitator refuses is (DESIGN.md: "invalid: 402 with the reason"): 402
// payment_invalid that says what is wrong, with a fresh challenge to pay from, before any
// facilitator verify, never a 500 and never a charge.
import Fastify from 'fastify';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { createTestApp, type TestApp } from '../helpers/app.js';
import { expectProblem } from '../helpers/problems.js';
import { standInFacilitator } from '../helpers/stand-in-facilitator.js';

const PAY_TO = '0x5555555555555555555555555555555555555555';
let t: TestApp;
let facilitator: Awaited<ReturnType<typeof standInFacilitator>>;
/** A service whose paid reports pay PAY_TO through the stand-in facilitator. */
const paidApp = () => createTestApp({ config: { facilitatorUrl: facilitator.url, payTo: PAY_TO } });
beforeAll(async () => {
  facilitator = await standInFacilitator();
  t = await paidApp();
});
afterAll(async () => {
  await t?.close();
  await facilitator?.close();
});

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const authorization = {
  from: '0x1111111111111111111111111111111111111111',
  to: PAY_TO,
  value: '1000',
  validAfter: '0',
  validBefore: '1900000000',
  nonce: `0x${'ab'.repeat(32)}`,
};
const SIGNATURE = `0x${'cd'.repeat(65)}`;
const v2 = (extra: string, auth: Record<string, unknown> = authorization, signature: unknown = SIGNATURE) =>
  b64(`{"x402Version":2,"payload":{"authorization":${JSON.stringify(auth)},"signature":${JSON.stringify(signature)}}${extra}}`);

it.each([
  ['not base64 at all', '%%%'],
  ['base64 of text that is not JSON', b64('hello')],
  ['JSON null', b64('null')],
  ['a JSON array', b64('[1,2]')],
  ['a JSON number', b64('42')],
  ['a payload of null', b64('{"x402Version":2,"payload":null}')],
  ['no authorization', b64('{"x402Version":2,"payload":{}}')],
  ['x402 version 1', b64(`{"x402Version":1,"payload":{"authorization":${JSON.stringify(authorization)}}}`)],
  ['a number too large for a double (1e999)', v2(',"junk":1e999')],
  // Fields the facilitator cannot read: the caller's mistake, never "the facilitator did not answer"
  ['validBefore that is not a number', v2('', { ...authorization, validBefore: 'soon' })],
  ['value that is not a number', v2('', { ...authorization, value: 'one' })],
  ['a negative value', v2('', { ...authorization, value: '-1' })],
  // The signature covers the number, not its text: a padded copy would be a second payload of one
  // authorization, and a padded validBefore was never seen to have passed.
  ['a value with leading zeros', v2('', { ...authorization, value: '0001000' })],
  ['a validBefore with leading zeros', v2('', { ...authorization, validBefore: `000000000000${authorization.validBefore}` })],
  ['a validAfter of 00', v2('', { ...authorization, validAfter: '00' })],
  ['a payee that is not an address', v2('', { ...authorization, to: '0x1234' })],
  ['a nonce that is not 32 bytes', v2('', { ...authorization, nonce: '0xabcd' })],
  ['no nonce', v2('', { ...authorization, nonce: undefined })],
  ['a signature that is not hex', v2('', authorization, 'nope')],
  ['no signature', v2('', authorization, null)],
  // Read as strictly as a request body. The SDK and the facilitator look members up by name, where
  // these names find what every object inherits: a 502 "did not answer", or the SDK's TypeError.
  ['a __proto__ member', v2(',"__proto__":{"x":1}')],
  ['a constructor.prototype member', v2(',"constructor":{"prototype":{"x":1}}')],
  ['an extension named constructor', v2(',"extensions":{"constructor":{}}')],
  ['an extension named toString', v2(',"extensions":{"toString":{}}')],
  ['a member named twice', b64(`{"x402Version":1,${Buffer.from(v2(''), 'base64').toString('utf8').slice(1)}`)],
  // The facilitator would settle the Permit2 one, while the service knows the payment by the other.
  ['a Permit2 authorization beside the EIP-3009 one', b64(`{"x402Version":2,"payload":{"authorization":${JSON.stringify(authorization)},"signature":"${SIGNATURE}","permit2Authorization":{"from":"${authorization.from}","nonce":"1"}}}`)],
  ['an unknown member in the authorization', v2('', { ...authorization, extra: '1' })],
  ['invalid UTF-8 once decoded', Buffer.concat([Buffer.from(Buffer.from(v2(',"note":"#"'), 'base64').toString('utf8').split('#')[0]!), Buffer.from([0xff]), Buffer.from('"}')]).toString('base64')],
])('PAYMENT-SIGNATURE with %s: 402 payment_invalid with the reason and a fresh challenge', async (_what, signature) => {
  const verifies = facilitator.verifies();
  const res = await t.app.inject({ method: 'GET', url: '/api/quick-check', headers: { 'payment-signature': signature } });
  const problem = expectProblem(res, 402, 'payment_invalid');
  expect(problem.detail).toMatch(/^the payment was not accepted \(PAYMENT-SIGNATURE\b.*nothing was charged$/);
  const challenge = JSON.parse(Buffer.from(String(res.headers['payment-required']), 'base64').toString('utf8'));
  expect(challenge).toMatchObject({ x402Version: 2, accepts: [{ scheme: 'exact', network: 'eip155:8453', amount: '1000' }] });
  expect(facilitator.verifies()).toBe(verifies);
});

it('the challenge for a header that is no payment is the plain one, and stays so for unpaid requests', async () => {
  const [fresh, plain] = [await paidApp(), await paidApp()];
  try {
    // The first challenge this instance builds is for a request whose header decodes (the SDK
    // would read it as a payment) but is refused here: nothing of it reaches the facilitator,
    // and the challenge built for it is the one an unpaid request gets.
    const verifies = facilitator.verifies();
    const bad = await fresh.app.inject({ method: 'GET', url: '/api/quick-check', headers: { 'payment-signature': v2('', { ...authorization, nonce: '0xabcd' }) } });
    expectProblem(bad, 402, 'payment_invalid');
    const unpaid = await fresh.app.inject({ method: 'GET', url: '/api/quick-check' });
    expectProblem(unpaid, 402, 'payment_required');
    // An instance that never saw such a header challenges alike.
    const challenge = (await plain.app.inject({ method: 'GET', url: '/api/quick-check' })).headers['payment-required'];
    expect(bad.headers['payment-required']).toBe(challenge);
    expect(unpaid.headers['payment-required']).toBe(challenge);
    expect(facilitator.verifies()).toBe(verifies);
  } finally {
    await fresh.close();
    await plain.close();
  }
});

it('a key quoted in the reason is redacted whole, wherever the reason is cut', async () => {
  // The validator names an unknown member, and the reason is cut to 200 characters: a key-shaped
  // name across the cut must not leave part of its secret behind.
  const secret = `Zq9${'x'.repeat(37)}K7w`;
  for (const pad of [0, 132, 150]) {
    const payload = { authorization, signature: SIGNATURE, [`${'.'.repeat(pad)}sgp_agent_${secret}`]: 1 };
    const signature = b64(JSON.stringify({ x402Version: 2, payload }));
    const res = await t.app.inject({ method: 'GET', url: '/api/quick-check', headers: { 'payment-signature': signature } });
    const problem = expectProblem(res, 402, 'payment_invalid');
    expect(problem.detail).not.toMatch(/Zq9x/);
    expect(res.body).not.toMatch(/Zq9x/);
  }
});

it('the challenge after a payment the facilitator refused is the plain one for unpaid requests', async () => {
  const [fresh, plain] = [await paidApp(), await paidApp()];
  try {
    // The first challenge this instance builds is for a payment that reaches the facilitator and
    // is refused: that challenge names the refusal, which is no unpaid caller's business.
    const challenge = String((await plain.app.inject({ method: 'GET', url: '/api/quick-check' })).headers['payment-required']);
    const required = JSON.parse(Buffer.from(challenge, 'base64').toString('utf8')) as { accepts: unknown[]; resource: unknown };
    const payment = v2(`,"accepted":${JSON.stringify(required.accepts[0])},"resource":${JSON.stringify(required.resource)}`);
    const verifies = facilitator.verifies();
    const refused = await fresh.app.inject({ method: 'GET', url: '/api/quick-check', headers: { 'payment-signature': payment } });
    expectProblem(refused, 402, 'payment_invalid');
    expect(facilitator.verifies()).toBe(verifies + 1);
    const unpaid = await fresh.app.inject({ method: 'GET', url: '/api/quick-check' });
    expectProblem(unpaid, 402, 'payment_required');
    expect(refused.headers['payment-required']).not.toBe(challenge);
    expect(unpaid.headers['payment-required']).toBe(challenge);
  } finally {
    await fresh.close();
    await plain.close();
  }
});

it('a facilitator that could not say what it supports is asked again on the next request', async () => {
  // A facilitator whose /supported fails once (a restart, a gateway's 503), then answers.
  const f = Fastify();
  let asked = 0;
  f.get('/supported', async (_request, reply) => {
    if (asked++ === 0) return reply.status(503).send({ error: 'starting' });
    return { kinds: [{ x402Version: 2, scheme: 'exact', network: 'eip155:8453' }], extensions: [], signers: {} };
  });
  const url = await f.listen({ host: '127.0.0.1', port: 0 });
  const app = await createTestApp({ config: { facilitatorUrl: url, payTo: PAY_TO } });
  const sdkComplaint = vi.spyOn(console, 'warn').mockImplementation(() => {}); // the SDK says so on stderr
  try {
    expectProblem(await app.app.inject({ method: 'GET', url: '/api/quick-check' }), 502, 'upstream_unavailable');
    expectProblem(await app.app.inject({ method: 'GET', url: '/api/quick-check' }), 402, 'payment_required');
    expect(asked).toBe(2);
  } finally {
    sdkComplaint.mockRestore();
    await app.close();
    await f.close();
  }
});
