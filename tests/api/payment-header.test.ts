// A PAYMENT-SIGNATURE header that is not an x402 v2 exact EIP-3009 payment is the caller's
// mistake: a 400 problem that says so, before any facilitator is asked, never a 500.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestApp, OFFLINE, type TestApp } from '../helpers/app.js';
import { expectProblem } from '../helpers/problems.js';

let t: TestApp;
beforeAll(async () => {
  t = await createTestApp({ config: { ...OFFLINE, payTo: '0x5555555555555555555555555555555555555555' } });
});
afterAll(async () => t?.close());

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const authorization = {
  from: '0x1111111111111111111111111111111111111111',
  to: '0x5555555555555555555555555555555555555555',
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
])('PAYMENT-SIGNATURE with %s: 400 invalid_request', async (_what, signature) => {
  const res = await t.app.inject({ method: 'GET', url: '/api/quick-check', headers: { 'payment-signature': signature } });
  const problem = expectProblem(res, 400, 'invalid_request');
  expect(problem.detail).toMatch(/^PAYMENT-SIGNATURE\b/);
});
