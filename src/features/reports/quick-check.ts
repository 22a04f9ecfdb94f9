import { Type, type Static } from 'typebox';
import { upstream, type ChainClient } from '../../platform/chain.js';
import { CHAIN_ID, NETWORK, USDC_ADDRESS } from '../../platform/prices.js';
import { Address, DateTime, StringEnum } from '../../platform/schemas.js';

/**
 * The quick check: is the configured RPC really Base (chain id 8453), and does the official USDC
 * contract have code there? Two reads, made in parallel. A misconfigured or hijacked RPC shows
 * up as FAIL, which is a delivered (and paid) result; only an unreadable chain is a 502.
 */

export const QUICK_CHECK_NOTE =
  'Chain identity and official USDC contract presence only; not a token-risk report, simulation, payment proof or contract audit.';

export const QuickCheckReport = Type.Object(
  {
    service: Type.Literal('paywarden quick check'),
    network: Type.Literal(NETWORK, { description: 'x402 network identifier of Base' }),
    status: StringEnum(['PASS', 'FAIL'] as const, { description: 'PASS when every check matched' }),
    checks: Type.Object({
      chainId: Type.Object({
        expected: Type.Literal(CHAIN_ID),
        observed: Type.Integer({ description: 'Chain id the configured RPC reported (eth_chainId)' }),
        match: Type.Boolean(),
      }),
      usdcContract: Type.Object({
        address: Address('The official USDC contract on Base'),
        codePresent: Type.Boolean({ description: 'Whether contract code exists at that address' }),
      }),
    }),
    checkedAt: DateTime(),
    note: Type.String({ description: 'What this check is not' }),
  },
  { description: 'Quick check of chain identity and official USDC contract presence' },
);
export type QuickCheckReport = Static<typeof QuickCheckReport>;

/** RPC calls: eth_chainId and eth_getCode, in parallel. Throws AppError upstream_unavailable (502). */
export async function quickCheck(chain: ChainClient, now: Date): Promise<QuickCheckReport> {
  const [observed, code] = await upstream(() =>
    Promise.all([chain.getChainId(), chain.getCode({ address: USDC_ADDRESS })]),
  );
  const match = observed === CHAIN_ID;
  // viem answers undefined for an empty account ("0x"); a self-destructed contract reads the same.
  const codePresent = code !== undefined && code !== '0x';
  return {
    service: 'paywarden quick check',
    network: NETWORK,
    status: match && codePresent ? 'PASS' : 'FAIL',
    checks: {
      chainId: { expected: CHAIN_ID, observed, match },
      usdcContract: { address: USDC_ADDRESS, codePresent },
    },
    checkedAt: now.toISOString(),
    note: QUICK_CHECK_NOTE,
  };
}
