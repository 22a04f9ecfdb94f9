// The pure part of the coverage check's Base reads: what bytecode and proxy slots say.
import { getAddress, type Hex } from 'viem';
import { describe, expect, it } from 'vitest';
import { contractFacts } from '../../src/features/tokens/chain-reader.js';

const TARGET = 'bebebebebebebebebebebebebebebebebebebebe';
const word = (addr: string) => `0x${'0'.repeat(24)}${addr}` as Hex;

describe('contract facts from eth_getCode and the proxy slots', () => {
  it('no code', () => {
    expect(contractFacts(undefined, undefined, undefined)).toEqual({
      codeSize: 0, cloneTarget: null, delegatedTo: null, eip1967Implementation: null, zosImplementation: null, delegatecall: false,
    });
    expect(contractFacts('0x', '0x0', '0x0').codeSize).toBe(0);
  });

  it('an EIP-1167 minimal proxy names its target', () => {
    const code = `0x363d3d373d3d3d363d73${TARGET}5af43d82803e903d91602b57fd5bf3` as Hex;
    const facts = contractFacts(code, word('0'.repeat(40)), undefined);
    expect(facts).toMatchObject({ codeSize: 45, cloneTarget: getAddress(`0x${TARGET}`), delegatecall: true, eip1967Implementation: null });
  });

  it('an EIP-7702 delegation designator is an account delegating to code, not a contract of its own', () => {
    const facts = contractFacts(`0xef0100${TARGET}` as Hex, undefined, undefined);
    expect(facts).toMatchObject({ codeSize: 23, delegatedTo: getAddress(`0x${TARGET}`), delegatecall: false });
  });

  it('reads the EIP-1967 and ZeppelinOS implementation slots; ignores zero and non-address words', () => {
    expect(contractFacts('0x6001', word(TARGET), undefined).eip1967Implementation).toBe(getAddress(`0x${TARGET}`));
    expect(contractFacts('0x6001', undefined, word(TARGET)).zosImplementation).toBe(getAddress(`0x${TARGET}`));
    expect(contractFacts('0x6001', `0x${'f'.repeat(64)}`, `0x${'0'.repeat(64)}`)).toMatchObject({ eip1967Implementation: null, zosImplementation: null });
  });

  it('delegates to unknown code: DELEGATECALL as an opcode (not in PUSH data) in code that does not itself dispatch transfer()', () => {
    const facts = (code: string) => contractFacts(code as Hex, undefined, undefined).delegatecall;
    expect(facts('0xf4')).toBe(true);
    expect(facts('0x60f4')).toBe(false); // PUSH1 0xf4
    expect(facts('0x61aaf4')).toBe(false); // PUSH2 0xaaf4
    expect(facts('0x61aaf4f4')).toBe(true);
    expect(facts(`0x7f${'f4'.repeat(32)}00`)).toBe(false); // PUSH32
    // A token's own code (it dispatches transfer) with a library DELEGATECALL, or an 0xf4 byte in
    // the compiler's metadata trailer: scanned as it is, as the paid report does.
    expect(facts('0x63a9059cbb14f4')).toBe(false);
  });
});
