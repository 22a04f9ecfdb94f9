import { Type, type Static } from 'typebox';
import { Address, DateTime, StringEnum } from '../../platform/schemas.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const Obj = (description?: string) => Type.Record(Type.String(), Type.Unknown(), description ? { description } : {});
const Hex = (description: string) => Type.String({ pattern: '^0x[0-9a-fA-F]*$', description });

const TokenInfo = Type.Object(
  {
    standard: Nullable(StringEnum(['erc20', 'erc721'] as const)),
    name: Nullable(Type.String()),
    symbol: Nullable(Type.String()),
    decimals: Nullable(Type.Integer({ minimum: 0, maximum: 255, description: 'ERC-20 decimals(); null when unreadable or above 255' })),
    totalSupply: Nullable(Type.String({ description: 'Base units, decimal string' })),
  },
  { description: 'Token metadata read on chain (USDC and WETH from a fixed table)' },
);

const AssetChange = Type.Object({
  standard: StringEnum(['native', 'erc20', 'erc721'] as const),
  token: Address(`Token contract; native ETH is ${'0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE'}`),
  symbol: Nullable(Type.String()),
  decimals: Nullable(Type.Integer({ minimum: 0, maximum: 255 })),
  from: Address(),
  to: Address(),
  amount: Type.String({ description: "Decimal string in the token's units; base units when decimals are unknown (decimals null)" }),
  rawAmount: Type.String({ description: 'Base units, decimal string' }),
  tokenId: Type.Optional(Type.String({ description: 'ERC-721 token id' })),
});

export const PREFLIGHT_DECISIONS = ['ALLOW', 'WARN', 'BLOCK', 'INCOMPLETE'] as const;

export const PreflightReport = Type.Object(
  {
    verdict: Type.Object({
      decision: StringEnum(PREFLIGHT_DECISIONS, { description: 'BLOCK if any block finding, WARN if any warn finding, INCOMPLETE if the simulation could not run, else ALLOW' }),
      score: Nullable(Type.Integer({ minimum: 0, maximum: 100, description: 'Risk: 0 nothing found; BLOCK 80..100, WARN 30..70; null when INCOMPLETE' })),
      confidence: StringEnum(['high', 'medium', 'low'] as const, { description: 'low without a simulation; medium when the evidence has a gap (no sender, no trace, unread token metadata)' }),
    }),
    destination: Type.Object({
      address: Address('The transaction destination (to)'),
      kind: Nullable(StringEnum(['eoa', 'contract', 'delegated-eoa', 'precompile'] as const, { description: 'null when the code could not be read' })),
      codeSize: Nullable(Type.Integer({ minimum: 0 })),
      delegate: Nullable(Address('EIP-7702 delegate of a delegated EOA')),
      knownAs: Nullable(Type.String({ description: 'Name of a canonical Base deployment, e.g. "USDC", "Uniswap V2 Router"' })),
      tokenInfo: Type.Optional(TokenInfo),
    }),
    call: Type.Array(
      Type.Object({
        path: Type.String({ description: '"0" is the transaction; "0.1" the second call of a batch inside it' }),
        target: Address(),
        selector: Nullable(Hex('First 4 bytes of calldata')),
        function: Nullable(Type.String({ description: 'Recognised function signature' })),
        args: Nullable(Obj('Decoded arguments (integers as decimal strings)')),
      }),
      { description: 'Calldata decoded statically, batches (multicall, Multicall3) recursively' },
    ),
    simulation: Type.Object({
      method: Nullable(StringEnum(['eth_simulateV1', 'debug_traceCall', 'eth_call'] as const)),
      sender: Address('The simulated sender: `from`, or a fresh address funded by state overrides'),
      senderProvided: Type.Boolean(),
      success: Nullable(Type.Boolean({ description: 'null when the simulation could not run' })),
      revertReason: Nullable(Type.String()),
      revertData: Nullable(Hex('Raw revert data')),
      gasUsed: Nullable(Type.Integer({ minimum: 0 })),
      assetChanges: Type.Array(AssetChange),
      balanceChanges: Type.Array(
        Type.Object({ address: Address(), token: Address(), symbol: Nullable(Type.String()), delta: Type.String({ description: 'Signed decimal in token units' }) }),
        { description: 'Net fungible change per address and token' },
      ),
      logsDecoded: Type.Array(
        Type.Object({
          address: Address(),
          event: Nullable(Type.String()),
          args: Nullable(Obj()),
          topics: Type.Optional(Type.Array(Type.String())),
          data: Type.Optional(Type.String()),
        }),
      ),
      blockNumber: Nullable(Type.Integer({ description: 'block.number as the simulated transaction saw it: the latest block, or the next one on nodes that simulate a new block on top of it' })),
      traced: Type.Boolean({ description: 'Whether a call trace (delegatecall check) was available' }),
    }),
    findings: Type.Array(
      Type.Object({
        code: Type.String({ description: 'Stable snake_case code' }),
        severity: StringEnum(['info', 'warn', 'block'] as const),
        message: Type.String(),
        evidence: Obj(),
      }),
    ),
    inputDigest: Type.String({
      description:
        'sha256 over the RFC 8785 JSON of { chain, to, from (null when absent), valueWei (decimal, "0" when absent), data ("0x" when absent) } with addresses and data lower-cased: check it represents the intended transaction',
    }),
    checkedAt: DateTime(),
    note: Type.String(),
  },
  { description: 'Simulation of an unsigned transaction on Base, with findings. Nothing was signed, sent or executed.' },
);
export type PreflightReport = Static<typeof PreflightReport>;
