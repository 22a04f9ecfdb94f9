import { describe, expect, it } from 'vitest';
import { facilitatorReason, isDefiniteRefusal } from '../../src/features/reports/settlement.js';

describe('isDefiniteRefusal: when may a failed settle say "nothing was charged"?', () => {
  it.each([
    'invalid_exact_evm_signature',
    'invalid_exact_evm_payload_authorization_valid_before',
    'invalid_exact_evm_payload_authorization_value_mismatch',
    'invalid_exact_evm_recipient_mismatch',
    'invalid_exact_evm_insufficient_balance',
    'invalid_exact_evm_transaction_simulation_failed',
    'insufficient_funds',
    'invalid_payload',
    'unsupported_scheme',
    'devnet_fault_injected',
  ])('%s is refused before anything is sent: failed', (reason) => {
    expect(isDefiniteRefusal(reason)).toBe(true);
  });

  it.each([
    // sending threw, possibly after broadcast; or a mined transaction whose events did not match
    'invalid_exact_evm_transaction_failed',
    'invalid_exact_evm_transfer_event_mismatch',
    'invalid_exact_evm_nonce_already_used',
    'invalid_transaction_state',
    'settlement_pending',
    'smart_wallet_deployment_failed',
    'facilitator_timeout',
    'facilitator_unavailable',
    // a reason this build does not know, even one shaped like a refusal
    'invalid_exact_evm_something_new',
    'Invalid_Exact_Evm_Signature',
    '',
  ])('%j leaves the payment uncertain: pending with a recovery order', (reason) => {
    expect(isDefiniteRefusal(reason)).toBe(false);
  });
});

describe('facilitatorReason: what of a facilitator\'s reason is passed on', () => {
  const PROSE = 'the facilitator gave a reason that is not an x402 code';
  it('passes x402 codes (snake_case, at most 80 characters) and replaces anything else', () => {
    expect(facilitatorReason('settlement_pending')).toBe('settlement_pending');
    expect(facilitatorReason('a'.repeat(80))).toBe('a'.repeat(80));
    expect(facilitatorReason('a'.repeat(81))).toBe(PROSE);
    for (const r of ['', 'Settlement_Pending', 'settlement pending', 'see https://x.invalid/?key=abc', 'code\n']) expect(facilitatorReason(r)).toBe(PROSE);
  });
});
