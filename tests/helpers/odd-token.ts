// A "token" that answers every call with the word 2^32 and emits a Transfer(caller, caller)
// of that amount: decimals() reads 2^32, transfer() reads "true". viem's uint8 decoder does not
// range-check, so this is what a hostile token can make a reader see.
import { createTestClient, http, type Address, type Hex } from 'viem';
import { baseDevnetChain } from '../../src/devnet/index.js';

const TRANSFER_TOPIC = 'ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef';
// mstore(0, 2^32); log3(0, 32, Transfer, caller, caller); return(0, 32)
const HUGE_DECIMALS_CODE = `0x6401000000006000523333${'7f'}${TRANSFER_TOPIC}60206000a360206000f3` as Hex;
export const HUGE_DECIMALS = 2n ** 32n;

/** Places the code at `address` on the devnet (anvil_setCode, no deployment). */
export async function placeHugeDecimalsToken(rpcUrl: string, address: Address): Promise<void> {
  const test = createTestClient({ chain: baseDevnetChain(rpcUrl), mode: 'anvil', transport: http(rpcUrl) });
  await test.setCode({ address, bytecode: HUGE_DECIMALS_CODE });
}
