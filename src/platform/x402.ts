import { isUtf8 } from 'node:buffer';
import type { FastifyRequest } from 'fastify';
import {
  FacilitatorTimeoutError,
  HTTPFacilitatorClient,
  x402HTTPResourceServer,
  x402ResourceServer,
  type RouteConfig,
} from '@x402/core/server';
import { decodePaymentRequiredHeader, decodePaymentSignatureHeader, encodePaymentRequiredHeader } from '@x402/core/http';
import { FacilitatorResponseError, SettleError, VerifyError, type PaymentPayload, type PaymentRequirements } from '@x402/core/types';
import { ExactEvmScheme } from '@x402/evm/exact/server';
import { bazaarResourceServerExtension, declareDiscoveryExtension } from '@x402/extensions/bazaar';
import { createCdpAuthHeaders } from '@coinbase/x402';
import { Type, type Static, type TSchema } from 'typebox';
import { ConfigError, type Config } from '../config.js';
import { digestOf } from './canonical.js';
import { AppError, redactKeys } from './errors.js';
import { compileBodyValidator } from './http.js';
import { repeatsMemberName } from './json-members.js';
import { Address, BYTES32_PATTERN, HEX_DATA_PATTERN } from './schemas.js';
import { NETWORK, PAID_REPORTS, USDC_ADDRESS, priceMicro, type PaidReportName } from './prices.js';

export type { PaymentPayload, PaymentRequirements };

export interface PaidRouteSpec {
  name: PaidReportName;
  input: TSchema | null;
  example?: Record<string, unknown>;
}

export type SettleOutcome =
  | { kind: 'settled'; transaction: string }
  | { kind: 'pending'; transaction?: string | undefined; reason: string }
  | { kind: 'failed'; reason: string; transaction?: string | undefined };

export type GateResult =
  /** The SDK's answer instead of the report: its status, its headers (PAYMENT-REQUIRED), the reason. */
  | { kind: 'respond'; status: number; headers: Record<string, string>; reason: string }
  | { kind: 'verified'; payload: PaymentPayload; requirements: PaymentRequirements; extensions?: Record<string, unknown> | undefined };

/**
 * What the service reads of a payment: an x402 v2 exact EIP-3009 authorization, every field in
 * the form EIP-3009 gives it. A field the facilitator cannot read is the caller's mistake (402
 * payment_invalid, see PaidReports.identify), not a facilitator that did not answer (its error
 * for such a payload reads as one). The
 * payload holds the authorization and its signature only; the other members of the envelope
 * (accepted, resource, extensions) are the SDK's to check.
 */
// Canonical digits only: the signature covers the number, not its text, so a padded `0001000`
// would pass the facilitator as the same authorization under another payload digest, and a
// validBefore read as text would never be seen to have passed.
const Uint256 = Type.String({ pattern: '^(?:0|[1-9][0-9]{0,77})$' });
const ExactEvmPayment = Type.Object({
  x402Version: Type.Literal(2),
  // The authorization and its signature, nothing beside them: the facilitator settles a payload
  // that also carries a `permit2Authorization` through Permit2, while this service would know the
  // payment by the EIP-3009 authorization it does not settle.
  payload: Type.Object(
    {
      signature: Type.String({ pattern: HEX_DATA_PATTERN, minLength: 4 }),
      authorization: Type.Object(
        {
          from: Address(),
          to: Address(),
          value: Uint256,
          validAfter: Uint256,
          validBefore: Uint256,
          nonce: Type.String({ pattern: BYTES32_PATTERN }),
        },
        { additionalProperties: false },
      ),
    },
    { additionalProperties: false },
  ),
});
type ExactEvmPayment = Static<typeof ExactEvmPayment>;
/** A transaction hash as a settlement names it. */
const TX_HASH = new RegExp(BYTES32_PATTERN);
const checkPayment = compileBodyValidator(ExactEvmPayment, 'PAYMENT-SIGNATURE');

/**
 * The x402 identity of a payment: who authorized it and with which single-use nonce, and the
 * digest of the whole payload (which tells a replay of this very payment from another use of
 * its authorization). Anything that is not such a payload throws an AppError saying why,
 * whatever it decodes to.
 */
export function paymentIdentity(header: string): { payload: PaymentPayload; authId: string; payer: string; digest: string } {
  let payload: PaymentPayload;
  let digest: string;
  try {
    payload = decodePaymentSignatureHeader(header);
    // canonicalize refuses what JSON cannot carry back (a number such as 1e999 parses to Infinity)
    digest = digestOf(payload);
  } catch {
    throw new AppError('invalid_request', 'PAYMENT-SIGNATURE is not a valid x402 v2 payment payload');
  }
  checkPaymentText(header, payload);
  checkPayment(payload);
  const { from, nonce } = (payload as unknown as ExactEvmPayment).payload.authorization;
  return { payload, authId: `${from.toLowerCase()}:${nonce.toLowerCase()}`, payer: from, digest };
}

/**
 * The decoded header is read as strictly as a request body: UTF-8 that decodes without
 * replacement, each member named once (I-JSON, as bodies: see json-members.ts), and no member
 * named like a property every object inherits (`__proto__`, `constructor`, `toString`, ...). The
 * SDK looks members up by name in plain objects, where such a name finds the inherited property:
 * `extensions: {"constructor": {}}` failed inside the SDK with a TypeError, and a `__proto__`
 * member made the facilitator refuse the verify call, which read as "did not answer" (502).
 */
function checkPaymentText(header: string, payload: unknown): void {
  const bytes = Buffer.from(header, 'base64');
  if (!isUtf8(bytes)) throw new AppError('invalid_request', 'PAYMENT-SIGNATURE is not valid UTF-8 once decoded from base64');
  if (repeatsMemberName(bytes.toString('utf8'), payload)) {
    throw new AppError('invalid_request', 'PAYMENT-SIGNATURE names a member twice in one object; send each member once');
  }
  const pending: unknown[] = [payload];
  while (pending.length) {
    const value = pending.pop();
    if (typeof value !== 'object' || value === null) continue;
    for (const key of Object.keys(value)) {
      if (key in Object.prototype) throw new AppError('invalid_request', `PAYMENT-SIGNATURE names a member "${key}", which no x402 payment has`);
      pending.push((value as Record<string, unknown>)[key]);
    }
  }
}

/**
 * A reason as a caller may see it: keys redacted before the text is cut (a cut through a key,
 * and a reason may quote a member name the caller sent, would leave a run too short to be
 * recognised as one), no control characters, no URLs (a facilitator's may hold its API key),
 * at most 200 characters.
 */
function shownReason(reason: string): string {
  return redactKeys(reason)
    .replace(/[\u0000-\u001f\u007f]+/g, ' ')
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/\S+/gi, '<url>')
    .slice(0, 200);
}

/**
 * The SDK's challenge headers, and why it challenged (the `error` of PAYMENT-REQUIRED), with that
 * reason shown as `shownReason` shows it, in the header too: the SDK copies the facilitator's
 * invalidReason there verbatim, of any length (a header of tens of kilobytes that the x402 client
 * cannot even read) and with whatever it quotes.
 */
function shownChallenge(headers: Record<string, string>): { headers: Record<string, string>; reason: string } {
  const name = Object.keys(headers).find((k) => k.toLowerCase() === 'payment-required');
  let required: ReturnType<typeof decodePaymentRequiredHeader> | undefined;
  try {
    required = name ? decodePaymentRequiredHeader(headers[name]!) : undefined;
  } catch {
    required = undefined;
  }
  const error = required?.error;
  if (!required || typeof error !== 'string') return { headers, reason: 'Payment required' };
  const shown = shownReason(error);
  const reason = shown.trim() ? shown : 'Payment required';
  if (shown === error) return { headers, reason };
  return { headers: { ...headers, [name!]: encodePaymentRequiredHeader({ ...required, error: shown }) }, reason };
}

/**
 * The problem answered instead of a report when the SDK gives a challenge: `payment_required`
 * when no payment was sent, `payment_invalid` when the one sent was not accepted, and
 * `precondition_failed` for the SDK's 412 (an allowance the payer must grant first). The reason
 * is the one PAYMENT-REQUIRED already carries to the caller (see shownChallenge).
 */
export function challengeProblem(gate: { status: number; headers: Record<string, string>; reason: string }, paid: boolean, price: string): AppError {
  const headers = gate.headers;
  const reason = shownReason(gate.reason);
  if (gate.status === 412) {
    return new AppError('precondition_failed', `the payment needs a precondition first (${reason}); see PAYMENT-REQUIRED; nothing was charged`, { headers });
  }
  if (!paid) {
    return new AppError(
      'payment_required',
      `this report costs ${price} USDC: an x402 v2 client reads the PAYMENT-REQUIRED header, authorizes that amount and sends the same request again with PAYMENT-SIGNATURE; nothing was charged`,
      { headers },
    );
  }
  return new AppError('payment_invalid', `the payment was not accepted (${reason}); sign a new one for the challenge in PAYMENT-REQUIRED; nothing was charged`, { headers });
}

/**
 * The SDK's facilitator client, except that a verify or settle without the facilitator's answer
 * (connection refused or dropped, a gateway's non-JSON 5xx) is thrown as a
 * FacilitatorResponseError, as a timeout is. x402HTTPResourceServer rethrows those, whereas it
 * turns any other error into a rejection: for settle `success: false`, which would read as
 * "rejected, nothing charged" although the facilitator may well have submitted the transfer; for
 * verify a 402 with a fresh challenge, which tells the caller to sign another payment although
 * nobody has judged this one (the gate answers 502 instead). Only an answer that carries the
 * facilitator's verdict (VerifyError or SettleError from a body with isValid or success, or a
 * 2xx body) is one.
 */
class UnansweredAwareFacilitator extends HTTPFacilitatorClient {
  override verify(...args: Parameters<HTTPFacilitatorClient['verify']>): ReturnType<HTTPFacilitatorClient['verify']> {
    return verdictOrUnanswered('verify', VerifyError, () => super.verify(...args));
  }

  override settle(...args: Parameters<HTTPFacilitatorClient['settle']>): ReturnType<HTTPFacilitatorClient['settle']> {
    return verdictOrUnanswered('settle', SettleError, () => super.settle(...args));
  }
}

/** `call`'s answer, or its failure: a verdict (`Verdict`) or timeout as thrown, anything else as unanswered. */
async function verdictOrUnanswered<T>(what: string, Verdict: abstract new (...a: never[]) => Error, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof Verdict || err instanceof FacilitatorResponseError) throw err;
    throw new FacilitatorResponseError(`facilitator ${what} unanswered: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/**
 * A CDP key the SDK cannot sign with stops the start. Otherwise the service would run, and every
 * paid request (the unpaid one included, which needs the facilitator's supported kinds) would be a
 * 502 "facilitator unavailable" without one facilitator call or a word about the key. The secret
 * is never quoted.
 */
export async function checkCdpKey(config: Pick<Config, 'cdpApiKeyId' | 'cdpApiKeySecret'>): Promise<void> {
  if (!config.cdpApiKeyId || !config.cdpApiKeySecret) return;
  try {
    await createCdpAuthHeaders(config.cdpApiKeyId, config.cdpApiKeySecret)?.();
  } catch {
    throw new ConfigError('invalid configuration: CDP_API_KEY_SECRET: the CDP SDK cannot sign with it (it expects a PEM EC key or a base64 Ed25519 key)');
  }
}

/**
 * The x402 v2 resource server of the SDK, driven from Fastify: it builds the 402 challenges,
 * asks the facilitator to verify and settle, and encodes PAYMENT-RESPONSE. Which steps run in
 * which order (and what is stored in between) is the pipeline's business, not this class's.
 */
export class PaymentGateway {
  private readonly http: x402HTTPResourceServer;
  private initialized: Promise<void> | undefined;
  private readonly challenges = new Map<string, GateResult>();

  constructor(
    private readonly config: Config,
    routes: PaidRouteSpec[],
  ) {
    const facilitator = new UnansweredAwareFacilitator({
      url: config.facilitatorUrl,
      timeoutMs: config.facilitatorTimeoutMs,
      // Coinbase's hosted facilitator wants a short-lived JWT signed with the CDP API key on every
      // call; its own package builds them, so no key handling is written here.
      ...(config.cdpApiKeyId && config.cdpApiKeySecret ? { createAuthHeaders: createCdpAuthHeaders(config.cdpApiKeyId, config.cdpApiKeySecret) } : {}),
    });
    const server = new x402ResourceServer(facilitator).register(NETWORK, new ExactEvmScheme());
    server.registerExtension(bazaarResourceServerExtension);
    const table: Record<string, RouteConfig> = {};
    for (const r of routes) {
      const report = PAID_REPORTS[r.name];
      table[`${report.method} ${report.path}`] = {
        accepts: {
          scheme: 'exact',
          network: NETWORK,
          payTo: config.payTo ?? '0x0000000000000000000000000000000000000000',
          price: { amount: priceMicro(r.name).toString(), asset: USDC_ADDRESS, extra: { name: 'USD Coin', version: '2' } },
          maxTimeoutSeconds: 120,
        },
        resource: `${config.publicBaseUrl}${report.path}`,
        description: report.description,
        mimeType: 'application/json',
        extensions: declareDiscoveryExtension(
          (r.input
            ? { bodyType: 'json', input: r.example ?? {}, inputSchema: JSON.parse(JSON.stringify(r.input)) }
            : { input: {} }) as Parameters<typeof declareDiscoveryExtension>[0],
        ),
      };
    }
    this.http = new x402HTTPResourceServer(server, table);
  }

  /** Learns what the facilitator supports, once; a failure is retried on the next request. */
  private async ready(): Promise<void> {
    if (!this.config.payTo) throw new AppError('payments_unavailable', 'this deployment has no PAY_TO address configured');
    this.initialized ??= this.http.initialize().catch((err: unknown) => {
      this.initialized = undefined;
      throw err;
    });
    // The SDK asks /supported again after a 429, sleeping as long as Retry-After says, three
    // times: a request waits for it at most FACILITATOR_TIMEOUT_MS, as for any facilitator
    // request (the next request waits for the same answer).
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('the facilitator did not say what it supports in time')), this.config.facilitatorTimeoutMs);
    });
    try {
      await Promise.race([this.initialized, deadline]);
    } catch {
      throw new AppError('upstream_unavailable', 'the payment facilitator is unavailable; nothing was charged');
    } finally {
      clearTimeout(timer);
    }
  }

  private context(request: FastifyRequest, paymentHeader?: string) {
    const path = request.url.split('?')[0] ?? request.url;
    return {
      adapter: {
        // The SDK reads the payment from the adapter: it sees the one given here, or none (the
        // challenge for a request whose header is no payment must not send that header on).
        getHeader: (name: string) => {
          const key = name.toLowerCase();
          if (key === 'payment-signature' || key === 'x-payment') return paymentHeader;
          const v = request.headers[key];
          return Array.isArray(v) ? v[0] : v;
        },
        getMethod: () => request.method,
        getPath: () => path,
        getUrl: () => `${this.config.publicBaseUrl}${request.url}`,
        getAcceptHeader: () => 'application/json',
        getUserAgent: () => String(request.headers['user-agent'] ?? ''),
        getBody: () => request.body,
      },
      path,
      method: request.method,
      ...(paymentHeader ? { paymentHeader } : {}),
    };
  }

  /** The 402 challenge when there is no payment; else the facilitator's verdict on it. */
  async gate(request: FastifyRequest, paymentHeader?: string): Promise<GateResult> {
    await this.ready();
    // A route's challenge is the same for every caller (fixed price, payee and resource URL):
    // build it once instead of on every unpaid request.
    const path = request.url.split('?')[0] ?? request.url;
    const cached = paymentHeader ? undefined : this.challenges.get(`${request.method} ${path}`);
    if (cached) return cached;
    let result;
    try {
      result = await this.http.processHTTPRequest(this.context(request, paymentHeader));
    } catch {
      throw new AppError('upstream_unavailable', 'the payment facilitator did not answer; nothing was charged');
    }
    if (result.type === 'payment-verified') {
      return { kind: 'verified', payload: result.paymentPayload, requirements: result.paymentRequirements, extensions: result.declaredExtensions };
    }
    if (result.type === 'payment-error') {
      // The SDK's body is `{}`; the caller gets a problem body instead (built per request, for its
      // requestId), so only the status, the headers and the reason are kept.
      const { headers, reason } = shownChallenge(Object.fromEntries(Object.entries(result.response.headers).filter(([k]) => k.toLowerCase() !== 'content-type')));
      const answer: GateResult = { kind: 'respond', status: result.response.status, headers, reason };
      if (!paymentHeader && result.response.status === 402 && this.challenges.size < 64) this.challenges.set(`${request.method} ${path}`, answer);
      return answer;
    }
    throw new AppError('internal_error');
  }

  /** Settles a verified payment. A timeout or `settlement_pending` is uncertain, never a failure. */
  async settle(payload: PaymentPayload, requirements: PaymentRequirements, extensions?: Record<string, unknown>): Promise<SettleOutcome> {
    try {
      // Inside the try: a facilitator that cannot even be reached now (after a restart, say) leaves
      // a stored payment uncertain, never "nothing was charged".
      await this.ready();
      const res = await this.http.processSettlement(payload, requirements, extensions);
      // Only the transaction: the payer is the authorization's, and PAYMENT-RESPONSE is built from
      // both (settlementHeaders), whatever else the facilitator says.
      // A success names its transaction: one without a transaction hash (the SDK accepts any
      // string) cannot be recorded, shown in PAYMENT-RESPONSE or looked up, so it is uncertain,
      // and the chain tells (a settled receipt naming no transaction never verified anything).
      if (res.success) return TX_HASH.test(res.transaction ?? '') ? { kind: 'settled', transaction: res.transaction } : { kind: 'pending', reason: 'settled_without_transaction' };
      if (res.errorReason === 'settlement_pending') return { kind: 'pending', transaction: res.transaction || undefined, reason: res.errorReason };
      return { kind: 'failed', reason: res.errorReason ?? 'settlement failed', transaction: res.transaction || undefined };
    } catch (err) {
      // A timed-out or unanswered settle may still land on chain: treat it as pending.
      const reason = err instanceof FacilitatorTimeoutError ? 'facilitator_timeout' : 'facilitator_unavailable';
      return { kind: 'pending', reason };
    }
  }

  /** PAYMENT-RESPONSE for a settlement seen earlier (a replayed or restored report). */
  settlementHeaders(transaction: string, payer: string): Record<string, string> {
    return this.http.createSettlementHeaders({ success: true, transaction, payer, network: NETWORK });
  }
}
