/**
 * The closed set of error codes and their HTTP statuses. Every non-2xx answer of the service is
 * one of these, rendered as an RFC 9457 problem body by `problemBody`. Policy outcomes (BLOCK,
 * HUMAN_APPROVAL) are data, never errors.
 */
export const ERROR_CODES = {
  invalid_request: { status: 400, title: 'Invalid request' },
  malformed_json: { status: 400, title: 'Malformed JSON body' },
  admin_key_required: { status: 401, title: 'Admin key required' },
  agent_key_required: { status: 401, title: 'Agent key required' },
  agent_bearer_key_required: { status: 401, title: 'Agent bearer key required' },
  payment_required: { status: 402, title: 'Payment required' },
  payment_invalid: { status: 402, title: 'Payment not accepted' },
  inactive: { status: 403, title: 'Agent or policy is inactive' },
  agent_mismatch: { status: 403, title: 'Agent does not match the policy' },
  not_found: { status: 404, title: 'Not found' },
  route_not_found: { status: 404, title: 'Route not found' },
  no_trading_pair: { status: 404, title: 'No Base trading pair found' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  conflict: { status: 409, title: 'Conflict' },
  request_id_conflict: { status: 409, title: 'Request ID conflict' },
  approval_conflict: { status: 409, title: 'Policy revision, budget or status conflict' },
  payment_conflict: { status: 409, title: 'Authorization or report input conflict' },
  intent_conflict: { status: 409, title: 'Intent conflict' },
  preflight_conflict: { status: 409, title: 'Different preflight already attached' },
  evidence_conflict: { status: 409, title: 'Conflicting concurrent evidence' },
  expired: { status: 410, title: 'Access expired' },
  approval_expired: { status: 410, title: 'Approval request expired' },
  recovery_expired: { status: 410, title: 'Recovery period expired' },
  request_timeout: { status: 408, title: 'Request timeout' },
  precondition_failed: { status: 412, title: 'Precondition failed' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  expectation_failed: { status: 417, title: 'Expectation failed' },
  rate_limited: { status: 429, title: 'Rate limit reached' },
  headers_too_large: { status: 431, title: 'Request header fields too large' },
  internal_error: { status: 500, title: 'Internal error' },
  upstream_unavailable: { status: 502, title: 'Upstream provider unavailable' },
  storage_unavailable: { status: 503, title: 'Storage unavailable' },
  provider_unavailable: { status: 503, title: 'Provider unavailable' },
  direct_checks_disabled: { status: 503, title: 'Direct pilot checks not enabled' },
  shutting_down: { status: 503, title: 'Shutting down' },
  payments_unavailable: { status: 503, title: 'Paid reports are not configured' },
} as const satisfies Record<string, { status: number; title: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/**
 * Seconds a caller is told to wait (Retry-After, and `retryAfter` in the body) when the error
 * itself does not say: a storage failure is usually over within seconds (a failover, a full disk
 * cleared, a lock released), and a client without a hint retries at once or gives up.
 */
const DEFAULT_RETRY_AFTER: Partial<Record<ErrorCode, number>> = { storage_unavailable: 5 };

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  code: ErrorCode;
  /** Always present (DESIGN.md section 3; the OpenAPI problem schema requires it). */
  detail: string;
  requestId: string;
  errors?: Array<{ path: string; message: string }>;
  retryAfter?: number;
}

/** A failure the service answers on purpose. `detail` is shown to the caller: keep secrets out. */
export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly title: string;
  readonly headers: Record<string, string>;
  readonly errors?: Array<{ path: string; message: string }>;
  readonly retryAfter?: number;

  constructor(
    code: ErrorCode,
    detail?: string,
    extra: {
      title?: string;
      headers?: Record<string, string>;
      errors?: Array<{ path: string; message: string }>;
      retryAfter?: number;
    } = {},
  ) {
    super(detail ?? ERROR_CODES[code].title);
    this.name = 'AppError';
    this.code = code;
    this.status = ERROR_CODES[code].status;
    this.title = extra.title ?? ERROR_CODES[code].title;
    this.headers = extra.headers ?? {};
    if (extra.errors) this.errors = extra.errors;
    const retryAfter = extra.retryAfter ?? DEFAULT_RETRY_AFTER[code];
    if (retryAfter !== undefined) this.retryAfter = retryAfter;
  }
}

/**
 * Text a log line or an error body may show: a URL, a host, a message, a validation error's
 * path. Keys travel in headers or bodies, but a caller who puts one where it does not belong
 * (`?key=sgp_admin_…`, a key pasted where a policy id goes, a key as a member name, which a
 * validation message names) must not find it in the logs, nor have it echoed to whoever reads
 * the answer: every run of 43 or more base64url characters (the length of a key's secret part, so
 * every admin, agent and recovery key), each of them also counted when percent-encoded, is
 * replaced, except what is public: 0x-prefixed hex (addresses, transaction hashes) and 64
 * lower-case hex digits (the `sha256:` digests of evidence, which a 409 names), and lower-case
 * words joined by underscores (x402 reason codes such as
 * `invalid_exact_evm_payload_authorization_value_mismatch`, which tell a payer what to fix; a
 * key's 43 random base64url characters are not of that shape). Identifiers the service issues
 * are shorter.
 */
export function redactKeys(text: string): string {
  return text.replace(KEY_LIKE, (run) => (PUBLIC_HEX.test(run) || SNAKE_CASE_CODE.test(run) ? run : '[redacted]'));
}
const KEY_LIKE = /(?:[A-Za-z0-9_-]|%[0-9A-Fa-f]{2}){43,}/g;
const PUBLIC_HEX = /^0x[0-9a-fA-F]+$|^[0-9a-f]{64}$/;
const SNAKE_CASE_CODE = /^[a-z][a-z0-9]{0,15}(?:_[a-z0-9]{1,16})+$/;

export function problemBody(err: AppError, requestId: string): ProblemBody {
  const body: ProblemBody = {
    type: `https://paywarden.dev/problems/${err.code.replace(/_/g, '-')}`,
    title: err.title,
    status: err.status,
    code: err.code,
    requestId,
    // AppError details are written by this service, never copied from a driver or an upstream
    // answer (those can hold internals such as RPC URLs with keys); unexpected errors never get here.
    // They may quote what the caller sent, though (a member name, a query parameter): redacted.
    detail: redactKeys(err.message),
  };
  if (err.errors) body.errors = err.errors.map((e) => ({ path: redactKeys(e.path), message: redactKeys(e.message) }));
  if (err.retryAfter !== undefined) body.retryAfter = err.retryAfter;
  return body;
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';
