/** Short terms and privacy texts the catalogue links to. */
export const TERMS = `Paywarden terms of service

1. Paywarden gives advisory payment-safety information about USDC on Base. It never holds keys, never signs, never executes and never authorizes a payment; executionAuthorized is always false.
2. Free tools need no wallet, payment or key. Their results are advisory. A caller-supplied policy in the free evaluation must be enforced by a separate trusted signer or approval service.
3. Paid reports are charged per delivered report over x402 (version 2, network eip155:8453, USDC), including INCOMPLETE or negative results. No paid check is invoked or charged automatically. A 402 answer is a payment request and charges nothing.
4. If a paid request is interrupted, restore the report through the recovery order; do not pay again.
5. Reports describe evidence observed at the time of the check. They are not an audit, a guarantee or permission to pay.
`;

export const PRIVACY = `Paywarden privacy policy

- Admin and agent keys are stored only as SHA-256 hashes and are never shown again after creation.
- Protected (pilot) policies and their decisions are kept for 30 days of access; then access ends (410) and the data is purged.
- Pilot-lead contact and workflow data, and the address the request came from (to trace abuse), are kept for 90 days, then deleted.
- Request sources (IP addresses) are used for rate limits. Each request's log line carries its source address and port and a request id, never credentials or payment signatures; the operator of the deployment decides how long logs are kept.
- Paid reports are kept without a time limit with their input, payer address, settlement transaction and signed payment, so that a report can be restored and its payment proven.
- On the embedded SQLite store, deleted data is overwritten in the database file.
`;
