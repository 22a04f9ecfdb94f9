import {
  decodeFunctionResult,
  encodeFunctionData,
  getAddress,
  hexToString,
  keccak256,
  parseAbi,
  size,
  slice,
  stringToHex,
  trim,
  type Address,
  type Hex,
} from 'viem';
import { tokenDecimals, tokenText } from '../../platform/token-metadata.js';
import { MULTICALL3_ADDRESS, type TokenMeta } from './known.js';

/**
 * The "context" of a preflight: what kind of account each address is (EOA, contract, EIP-7702
 * delegated) and the metadata of the tokens involved, read in ONE call so that it can ride in
 * the same eth_simulateV1 request as the transaction (or one eth_call on the fallback path).
 *
 * Account kinds come from a 41-byte probe contract placed by state override (no deployment):
 * for each 32-byte word of calldata (an address) it returns EXTCODESIZE and the first 32 bytes
 * of code. Under EIP-7702 an EOA's code is the 23-byte designator 0xef0100 || delegate, which
 * is how a delegated EOA is told from a contract. Hand-assembled:
 *   i=0; loop: if !(i < calldatasize) goto end; a=calldataload(i);
 *   mstore(2i, extcodesize(a)); extcodecopy(a, 2i+32, 0, 32); i+=32; goto loop;
 *   end: return(0, 2*calldatasize)
 */
export const PROBE_CODE = ('0x5f5b368110156023578035803b82800152' + '60205f83800160200183' + '3c50602001600156' + '5b3680015ff3') as Hex;
export const PROBE_ADDRESS: Address = getAddress(slice(keccak256(stringToHex('paywarden.preflight.code-probe')), 12));

const multicall3 = parseAbi([
  'struct Call3 { address target; bool allowFailure; bytes callData; }',
  'struct Result { bool success; bytes returnData; }',
  'function aggregate3(Call3[] calls) payable returns (Result[] returnData)',
  'function getBlockNumber() view returns (uint256 blockNumber)',
]);
const tokenAbi = parseAbi([
  'function name() view returns (string)',
  'function symbol() view returns (string)',
  'function decimals() view returns (uint8)',
  'function totalSupply() view returns (uint256)',
  'function supportsInterface(bytes4 id) view returns (bool)',
]);
const ERC721_INTERFACE = '0x80ac58cd';
const TOKEN_READS = 5;

export interface AccountCode {
  codeSize: number;
  /** True for an EIP-7702 designator (0xef01…). */
  delegated: boolean;
  /** The delegate, when the node shows the full 23-byte designator. */
  delegate: Address | null;
}

export interface ContextRequest {
  accounts: Address[];
  tokens: Address[];
}

export interface Context {
  /** block.number the read ran in (the fallback path has no other source of it). */
  blockNumber: bigint | null;
  accounts: Map<string, AccountCode>;
  tokens: Map<string, TokenMeta>;
}

/** The aggregate3 calldata and the state override that places the probe. */
export function contextCall(req: ContextRequest): { to: Address; data: Hex; stateOverride: Record<string, { code: Hex }> } {
  const calls = [
    { target: MULTICALL3_ADDRESS, allowFailure: true, callData: encodeFunctionData({ abi: multicall3, functionName: 'getBlockNumber' }) },
    { target: PROBE_ADDRESS, allowFailure: true, callData: ('0x' + req.accounts.map((a) => a.slice(2).toLowerCase().padStart(64, '0')).join('')) as Hex },
    ...req.tokens.flatMap((token) => [
      ...(['name', 'symbol', 'decimals', 'totalSupply'] as const).map((functionName) => ({
        target: token,
        allowFailure: true,
        callData: encodeFunctionData({ abi: tokenAbi, functionName }),
      })),
      { target: token, allowFailure: true, callData: encodeFunctionData({ abi: tokenAbi, functionName: 'supportsInterface', args: [ERC721_INTERFACE] }) },
    ]),
  ];
  return {
    to: MULTICALL3_ADDRESS,
    data: encodeFunctionData({ abi: multicall3, functionName: 'aggregate3', args: [calls] }),
    stateOverride: { [PROBE_ADDRESS]: { code: PROBE_CODE } },
  };
}

/** Reads the aggregate3 answer; anything that does not decode is "unknown" (null), never a guess. */
export function decodeContext(req: ContextRequest, returnData: Hex): Context {
  const out: Context = { blockNumber: null, accounts: new Map(), tokens: new Map() };
  let results: readonly { success: boolean; returnData: Hex }[];
  try {
    results = decodeFunctionResult({ abi: multicall3, functionName: 'aggregate3', data: returnData });
  } catch {
    return out;
  }
  const head = results[0];
  if (head?.success && size(head.returnData) === 32) out.blockNumber = BigInt(head.returnData);
  const probe = results[1];
  if (probe?.success && size(probe.returnData) === 64 * req.accounts.length) {
    req.accounts.forEach((a, i) => {
      const codeSize = Number(BigInt(slice(probe.returnData, 64 * i, 64 * i + 32)));
      const head = slice(probe.returnData, 64 * i + 32, 64 * i + 64);
      const delegated = codeSize > 0 && head.startsWith('0xef01');
      const delegate = delegated && codeSize === 23 && head.startsWith('0xef0100') ? getAddress(slice(head, 3, 23)) : null;
      out.accounts.set(a.toLowerCase(), { codeSize, delegated, delegate });
    });
  }
  req.tokens.forEach((token, t) => {
    const r = results.slice(2 + t * TOKEN_READS, 2 + (t + 1) * TOKEN_READS);
    const read = <T>(i: number, fn: (d: Hex) => T): T | null => {
      const x = r[i];
      if (!x?.success || size(x.returnData) === 0) return null;
      try {
        return fn(x.returnData);
      } catch {
        return null;
      }
    };
    const name = read(0, text('name'));
    const symbol = read(1, text('symbol'));
    const decimals = read(2, (d) => tokenDecimals(decodeFunctionResult({ abi: tokenAbi, functionName: 'decimals', data: d })));
    const totalSupply = read(3, (d) => decodeFunctionResult({ abi: tokenAbi, functionName: 'totalSupply', data: d }));
    const nft = read(4, (d) => decodeFunctionResult({ abi: tokenAbi, functionName: 'supportsInterface', data: d }));
    const standard = nft === true ? 'erc721' : decimals !== null && symbol !== null ? 'erc20' : null;
    if (name !== null || symbol !== null || decimals !== null || nft === true) {
      out.tokens.set(token.toLowerCase(), { name, symbol, decimals, totalSupply, standard });
    }
  });
  return out;
}

/** string, or bytes32 for old tokens (MKR-style); control, bidi and invisible characters are dropped so labels stay honest. */
function text(functionName: 'name' | 'symbol') {
  return (d: Hex): string => {
    const s = size(d) === 32 ? hexToString(trim(d, { dir: 'right' })) : decodeFunctionResult({ abi: tokenAbi, functionName, data: d });
    return tokenText(s, 64);
  };
}
