import { decodeErrorResult, parseAbi, size, slice, type Hex } from 'viem';
import { plain } from './plain.js';

/**
 * Revert data to words. The node gives raw bytes; the caller deserves "ERC20: transfer amount
 * exceeds balance" or "ERC20InsufficientBalance(sender, 0, 1)", not 0x08c379a0…. Custom errors
 * can only be named from a table of selectors (there is no registry offline): the table holds
 * the errors of the libraries most Base contracts are built from (OpenZeppelin 5, Permit2,
 * Solady); any other selector is reported as such.
 */

const KNOWN_ERRORS = parseAbi([
  'error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)',
  'error ERC20InsufficientAllowance(address spender, uint256 allowance, uint256 needed)',
  'error ERC20InvalidSender(address sender)',
  'error ERC20InvalidReceiver(address receiver)',
  'error ERC20InvalidApprover(address approver)',
  'error ERC20InvalidSpender(address spender)',
  'error ERC2612ExpiredSignature(uint256 deadline)',
  'error ERC2612InvalidSigner(address signer, address owner)',
  'error ERC721NonexistentToken(uint256 tokenId)',
  'error ERC721InsufficientApproval(address operator, uint256 tokenId)',
  'error ERC721InvalidOperator(address operator)',
  'error OwnableUnauthorizedAccount(address account)',
  'error AccessControlUnauthorizedAccount(address account, bytes32 neededRole)',
  'error EnforcedPause()',
  'error ReentrancyGuardReentrantCall()',
  'error SafeERC20FailedOperation(address token)',
  'error AddressInsufficientBalance(address account)',
  'error InsufficientBalance(uint256 balance, uint256 needed)',
  'error FailedInnerCall()',
  'error FailedCall()',
  'error SignatureExpired(uint256 signatureDeadline)',
  'error InvalidNonce()',
  'error InsufficientAllowance(uint256 amount)',
  'error AllowanceExpired(uint256 deadline)',
  'error InvalidSignature()',
  'error InvalidSigner()',
  'error InvalidAmount(uint256 maxAmount)',
  'error LengthMismatch()',
  'error TransferFromFailed()',
  'error TransferFailed()',
  'error ApproveFailed()',
  'error Unauthorized()',
]);

const PANICS: Record<number, string> = {
  0x01: 'assertion failed',
  0x11: 'arithmetic overflow or underflow',
  0x12: 'division or modulo by zero',
  0x21: 'invalid enum value',
  0x22: 'corrupt storage byte array',
  0x31: 'pop on an empty array',
  0x32: 'array index out of bounds',
  0x41: 'out of memory',
  0x51: 'call to an uninitialised function',
};

export interface DecodedRevert {
  kind: 'empty' | 'error-string' | 'panic' | 'custom-error' | 'unknown-custom-error' | 'undecodable' | 'insufficient-funds';
  /** Human-readable reason, e.g. "ERC20: transfer amount exceeds balance". */
  reason: string;
  /** First four bytes of the revert data, or null when it had none. */
  selector: Hex | null;
  errorName: string | null;
  args: Record<string, unknown> | null;
}

export function decodeRevert(data: Hex | null | undefined): DecodedRevert {
  const raw = (data ?? '0x').toLowerCase() as Hex;
  if (size(raw) === 0) {
    return { kind: 'empty', reason: 'reverted without a reason', selector: null, errorName: null, args: null };
  }
  if (size(raw) < 4) {
    return { kind: 'undecodable', reason: `reverted with ${raw}`, selector: null, errorName: null, args: null };
  }
  const selector = slice(raw, 0, 4);
  try {
    // viem knows Error(string) and Panic(uint256) without being told.
    const d = decodeErrorResult({ abi: KNOWN_ERRORS, data: raw });
    const values = (d.args ?? []) as readonly unknown[];
    const name: string = d.errorName;
    if (name === 'Error') {
      return { kind: 'error-string', reason: String(values[0]), selector, errorName: 'Error', args: null };
    }
    if (name === 'Panic') {
      const code = Number(values[0]);
      const why = PANICS[code] ?? 'unknown panic';
      return { kind: 'panic', reason: `panic 0x${code.toString(16).padStart(2, '0')}: ${why}`, selector, errorName: 'Panic', args: { code } };
    }
    const inputs = d.abiItem.type === 'error' ? d.abiItem.inputs : [];
    const args: Record<string, unknown> = {};
    inputs.forEach((p, i) => (args[p.name ?? String(i)] = plain(values[i])));
    const shown = inputs.map((p, i) => `${p.name ?? i}=${String(plain(values[i]))}`).join(', ');
    return { kind: 'custom-error', reason: `${d.errorName}(${shown})`, selector, errorName: d.errorName, args };
  } catch {
    return { kind: 'unknown-custom-error', reason: `custom error ${selector}`, selector, errorName: null, args: null };
  }
}
