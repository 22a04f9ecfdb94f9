import type { ChainClient } from '../../platform/chain.js';
import type { PaidReportDef } from '../reports/pipeline.js';
import { PreflightRequest, checkPreflightRequest } from '../reports/schemas.js';
import { transactionPreflight, type PreflightInput, type PreflightOptions } from './preflight.js';
import { PreflightReport } from './schemas.js';

export const PREFLIGHT_DESCRIPTION = [
  'Simulates the unsigned transaction on the latest Base state (eth_simulateV1 with traced native transfers; eth_call with debug_traceCall on nodes without it) and reports what it would do: destination kind (EOA, contract, EIP-7702 delegated EOA, precompile), decoded calldata (ERC-20, ERC-2612 permit, Permit2, setApprovalForAll, multicall and Multicall3 batches), asset changes, decoded logs and findings. Approvals of the sender\'s assets that the simulation\'s logs show (ERC-20 Approval, ApprovalForAll, Permit2) are judged like decoded ones, so an approval made inside a call the decoder cannot read (a smart account\'s execute, a batch) is not missed.',
  'Without `from`, a fresh sender funded with ETH and USDC by state overrides is simulated. eth_simulateV1 runs the transaction at a gas price of 0.01 gwei (a contract cannot tell it from a real one by a zero tx.gasprice), the sender being handed that gas money inside the simulation, so only the value must be covered by its balance. Limits: in such a simulation nodes report block.basefee as 0, and the call trace (debug_traceCall) and the eth_call fallback run at gas price 0.',
  'Decision: BLOCK if any block finding, WARN if any warn finding, INCOMPLETE if the simulation could not run, else ALLOW. Score is risk (0 none, BLOCK 80-100, WARN 30-70, null when INCOMPLETE).',
  'Findings (code: severity): simulation_reverted: block (warn with a fresh sender); insufficient_native_balance, native_value_rejected, transfer_to_token_contract, transfer_to_burn_address, recipient_address_poisoning: block; approval_unlimited, approval_very_large, approval_to_eoa, calldata_to_eoa, delegated_destination, delegatecall_in_trace, usdc_outflow_without_return, permit_expired: warn; approval_for_all, approval_revoked, proxy_destination, fresh_sender, trace_unavailable, poisoning_check_unavailable, simulation_unavailable: info.',
  'usdc_outflow_without_return: USDC leaves the sender through a contract (not a plain USDC transfer) and what comes back is less USDC, or nothing; USDC coming back counts at face value. Any other asset coming back (ETH, another token, an NFT) counts as a return, since this check cannot price it: read assetChanges to see whether it is worth what was paid.',
  'The verdict rests only on this transaction and the chain state read for it: no stored or earlier answer (a token-risk report anyone bought, say) enters it, so the same transaction on the same state gets the same report whoever asks. For a verdict on a token itself, buy its token-risk report.',
  'inputDigest covers the normalised unsigned input; check it represents the intended transaction. Nothing is signed, sent or executed. 502 when the chain cannot be read, or when the RPC does not say it serves Base (eth_chainId 8453): nothing charged.',
].join('\n\n');

/** POST /api/transaction-preflight for the paid-report pipeline. */
export function transactionPreflightReportDef(chain: ChainClient, opts: PreflightOptions = {}): PaidReportDef {
  return {
    name: 'transactionPreflight',
    body: PreflightRequest,
    response: PreflightReport,
    summary: 'Transaction preflight: simulate an unsigned transaction and report what it would do',
    description: PREFLIGHT_DESCRIPTION,
    example: {
      chain: 'base',
      to: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      from: '0x1111111111111111111111111111111111111111',
      data: '0xa9059cbb00000000000000000000000022222222222222222222222222222222222222220000000000000000000000000000000000000000000000000000000000989680',
    },
    check: checkPreflightRequest,
    produce: (input: PreflightInput, now) => transactionPreflight(chain, input, now, opts),
  };
}
