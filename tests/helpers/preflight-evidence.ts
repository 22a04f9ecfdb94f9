// Evidence for the pure preflight rules: a clean, fully evidenced USDC transfer that each test
// bends one way (tests/unit/preflight-findings.test.ts and preflight-verdict.test.ts).
import { encodeFunctionData, parseAbi, type Address, type Hex } from 'viem';
import type { AssetMovement } from '../../src/features/preflight/assets.js';
import { decodeCalldata } from '../../src/features/preflight/calldata.js';
import type { AccountCode } from '../../src/features/preflight/context.js';
import { findingsOf, type Finding, type PreflightEvidence } from '../../src/features/preflight/findings.js';
import { DEAD_ADDRESS, PERMIT2_ADDRESS, STATIC_TOKENS, USDC, type TokenMeta } from '../../src/features/preflight/known.js';
import { decodeRevert, type DecodedRevert } from '../../src/features/preflight/revert.js';
import { PreflightReport } from '../../src/features/preflight/schemas.js';
import { expectMatchesSchema } from './schema.js';

export const SENDER: Address = '0x1111111111111111111111111111111111111111';
export const EOA: Address = '0x2222222222222222222222222222222222222222';
export const CONTRACT: Address = '0x4444444444444444444444444444444444444444';
export const TOKEN: Address = '0x5555555555555555555555555555555555555555';
export const NFT: Address = '0x6666666666666666666666666666666666666666';
export const DELEGATED: Address = '0x7777777777777777777777777777777777777777';
export const NOW = new Date('2026-01-15T12:00:00Z');

const abi = parseAbi([
  'function transfer(address to, uint256 amount)',
  'function transferFrom(address from, address to, uint256 amount)',
  'function approve(address spender, uint256 amount)',
  'function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)',
  'function setApprovalForAll(address operator, bool approved)',
]);
export const enc = (functionName: string, args: unknown[]) => encodeFunctionData({ abi, functionName, args } as never) as Hex;
export const code = (codeSize: number, delegate: Address | null = null): AccountCode => ({ codeSize, delegated: delegate !== null, delegate });
export const ACCOUNTS = new Map<string, AccountCode>([
  [USDC.toLowerCase(), code(23464)],
  [TOKEN.toLowerCase(), code(3000)],
  [NFT.toLowerCase(), code(2000)],
  [CONTRACT.toLowerCase(), code(500)],
  [EOA.toLowerCase(), code(0)],
  [DELEGATED.toLowerCase(), code(23, CONTRACT)],
  [DEAD_ADDRESS.toLowerCase(), code(0)],
  [PERMIT2_ADDRESS.toLowerCase(), code(9000)],
]);
export const TOKENS = new Map<string, TokenMeta>([
  ...Object.entries(STATIC_TOKENS),
  [TOKEN.toLowerCase(), { name: 'Token', symbol: 'TKN', decimals: 18, totalSupply: 10n ** 24n, standard: 'erc20' }],
  [NFT.toLowerCase(), { name: 'Nft', symbol: 'NFT', decimals: null, totalSupply: null, standard: 'erc721' }],
]);

export interface Setup extends Partial<Omit<PreflightEvidence, 'tx' | 'simulation'>> {
  to?: Address;
  value?: bigint;
  data?: Hex;
  simulation?: Partial<PreflightEvidence['simulation']>;
}

/** A clean, fully evidenced USDC transfer unless told otherwise. */
export function evidence(s: Setup = {}): PreflightEvidence {
  const tx = { from: SENDER, to: s.to ?? USDC, value: s.value ?? 0n, data: s.data ?? enc('transfer', [EOA, 1_000_000n]) };
  return {
    tx,
    senderProvided: s.senderProvided ?? true,
    decoded: s.decoded ?? decodeCalldata(tx.to, tx.data, tx.from),
    logApprovals: s.logApprovals ?? [],
    accounts: s.accounts ?? ACCOUNTS,
    tokens: s.tokens ?? TOKENS,
    simulation: { ran: true, success: true, revert: null, valueRejected: null, unavailable: null, ...s.simulation },
    trace: s.trace === undefined ? { delegatecalls: [], topLevelSubcalls: 0, frames: 1 } : s.trace,
    movements: s.movements ?? [],
    counterparties: s.counterparties === undefined ? [] : s.counterparties,
    counterpartiesFailed: s.counterpartiesFailed ?? false,
  };
}
export const codes = (f: Finding[]) => f.map((x) => `${x.severity}:${x.code}`);
/** The findings' codes; the findings must carry nothing the report schema does not declare. */
export const run = (s: Setup = {}) => {
  const findings = findingsOf(evidence(s), NOW);
  expectMatchesSchema(PreflightReport.properties.findings, findings);
  return codes(findings);
};
export const move = (token: Address, from: Address, to: Address, amount: bigint, standard: AssetMovement['standard'] = 'erc20'): AssetMovement => ({ standard, token, from, to, amount, tokenId: null });
export const reverted = (r: DecodedRevert = decodeRevert('0x')) => ({ success: false, revert: r });
