import { getAddress, toFunctionSelector, type Address, type Hex } from 'viem';
import type { PrivilegedSelector, PrivilegeKind } from './evidence.js';

/**
 * Pure bytecode reading: which 4-byte selectors a contract dispatches on, whether it delegates
 * its calls, and the two "code that points elsewhere" patterns (EIP-1167 clones, EIP-7702
 * delegation designators). A selector found in the bytecode means the function exists; it says
 * nothing about who may call it (ownership and roles answer that).
 */

const PRIVILEGED: Array<[PrivilegeKind, string[]]> = [
  ['mint', ['mint(address,uint256)', 'mint(uint256)', 'mintTo(address,uint256)', 'issue(uint256)', 'increaseSupply(uint256)', 'configureMinter(address,uint256)']],
  ['pause', ['pause()', 'unpause()', 'setPaused(bool)', 'pauseTransfers()']],
  [
    'blacklist',
    [
      'blacklist(address)', 'unBlacklist(address)', 'addToBlacklist(address)', 'removeFromBlacklist(address)',
      'setBlacklist(address,bool)', 'blacklistAddress(address,bool)', 'addBlackList(address)', 'setBlacklisted(address,bool)',
      'freeze(address)', 'freezeAccount(address,bool)', 'setBots(address[],bool)', 'setBot(address,bool)', 'blockBots(address[])',
    ],
  ],
  [
    'fee',
    [
      'setFee(uint256)', 'setFees(uint256,uint256)', 'setTaxFee(uint256)', 'setBuyFee(uint256)', 'setSellFee(uint256)',
      'setTax(uint256)', 'setTaxes(uint256,uint256)', 'setBuyTax(uint256)', 'setSellTax(uint256)', 'updateFees(uint256,uint256)',
      'setFeePercent(uint256)', 'excludeFromFee(address)', 'setExcludedFromFee(address,bool)',
      // the buy and sell tax setters of the common launch templates (marketing, liquidity, dev shares)
      'updateBuyFees(uint256,uint256,uint256)', 'updateSellFees(uint256,uint256,uint256)',
      'updateBuyFees(uint256,uint256,uint256,uint256)', 'updateSellFees(uint256,uint256,uint256,uint256)',
      'setBuyFees(uint256,uint256,uint256)', 'setSellFees(uint256,uint256,uint256)', 'excludeFromFees(address,bool)',
    ],
  ],
  [
    'limit',
    [
      'setMaxTxAmount(uint256)', 'setMaxWalletSize(uint256)', 'setMaxWallet(uint256)', 'setMaxTxPercent(uint256)',
      'setMaxTransactionAmount(uint256)', 'updateMaxTxnAmount(uint256)', 'updateMaxWalletAmount(uint256)', 'setCooldown(uint256)',
    ],
  ],
  ['trading', ['enableTrading()', 'openTrading()', 'startTrading()', 'setTradingEnabled(bool)', 'setTrading(bool)', 'tradingStatus(bool)']],
  ['upgrade', ['upgradeTo(address)', 'upgradeToAndCall(address,bytes)']],
];

/** Every selector the scan recognises, with its signature and kind. */
export const PRIVILEGED_SELECTORS: PrivilegedSelector[] = PRIVILEGED.flatMap(([kind, sigs]) =>
  sigs.map((signature) => ({ selector: toFunctionSelector(`function ${signature}`), signature, kind })),
);

export const SELECTOR = {
  transfer: toFunctionSelector('function transfer(address,uint256)'),
  grantRole: toFunctionSelector('function grantRole(bytes32,address)'),
  hasRole: toFunctionSelector('function hasRole(bytes32,address)'),
} as const;

const hexBytes = (code: Hex): Uint8Array => {
  const hex = code.startsWith('0x') ? code.slice(2) : code;
  const out = new Uint8Array(hex.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return out;
};

export interface CodeScan {
  /** Values of PUSH1..PUSH4 immediates, as 4-byte selectors (solc pushes a selector with leading zero bytes in fewer bytes). */
  pushedSelectors: Set<string>;
  /** A DELEGATECALL opcode outside push data. */
  delegatecall: boolean;
}

/** Walks the opcodes once (skipping push data, so data bytes are never read as opcodes). */
export function scanCode(code: Hex): CodeScan {
  const bytes = hexBytes(code);
  const pushedSelectors = new Set<string>();
  let delegatecall = false;
  for (let i = 0; i < bytes.length; i++) {
    const op = bytes[i]!;
    if (op >= 0x60 && op <= 0x7f) {
      const n = op - 0x5f;
      if (n <= 4 && i + n < bytes.length) {
        let v = 0;
        for (let k = 1; k <= n; k++) v = v * 256 + bytes[i + k]!;
        pushedSelectors.add(`0x${v.toString(16).padStart(8, '0')}`);
      }
      i += n;
    } else if (op === 0xf4) {
      delegatecall = true;
    }
  }
  return { pushedSelectors, delegatecall };
}

export const hasSelector = (scan: CodeScan, selector: Hex): boolean => scan.pushedSelectors.has(selector.toLowerCase());

/**
 * Whether a contract runs code kept elsewhere that no standard proxy slot names: a DELEGATECALL in
 * code that does not itself dispatch transfer(). A token whose own code has both (a library call,
 * or a 0xf4 byte in the compiler's metadata trailer read as an opcode) is scanned as it is. The
 * paid report and the free coverage check apply this one rule, so they agree.
 */
export const delegatesToUnknownCode = (scan: CodeScan): boolean => scan.delegatecall && !hasSelector(scan, SELECTOR.transfer);

/** The privileged functions whose selectors the code dispatches on, in table order. */
export function privilegedSelectors(scan: CodeScan): PrivilegedSelector[] {
  return PRIVILEGED_SELECTORS.filter((p) => scan.pushedSelectors.has(p.selector));
}

const EIP1167 = /^0x363d3d373d3d3d363d73([0-9a-f]{40})5af43d82803e903d91602b57fd5bf3$/i;
const EIP7702 = /^0xef0100([0-9a-f]{40})$/i;

/** The implementation of an EIP-1167 minimal proxy, or null. */
export function eip1167Target(code: Hex): Address | null {
  const m = EIP1167.exec(code);
  return m ? getAddress(`0x${m[1]}`) : null;
}

/** The delegate of an EIP-7702 delegated account (code 0xef0100 || address), or null. */
export function eip7702Delegate(code: Hex): Address | null {
  const m = EIP7702.exec(code);
  return m ? getAddress(`0x${m[1]}`) : null;
}

export const codeSize = (code: Hex | undefined): number => (code ? (code.length - 2) >> 1 : 0);
