// anvil's well-known dev accounts, derived from its default mnemonic rather than
// hard-coded so the source of truth is visible.
import { toHex, type Address, type Hex } from 'viem';
import { mnemonicToAccount, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';

export const ANVIL_MNEMONIC = 'test test test test test test test test test test test junk';

export interface DevAccount {
  address: Address;
  privateKey: Hex;
}

// Each derivation re-runs the BIP-39 seed stretch (~30 ms), so derive once per process.
const cache = new Map<number, DevAccount>();

function derive(index: number): DevAccount {
  let acct = cache.get(index);
  if (!acct) {
    const hd = mnemonicToAccount(ANVIL_MNEMONIC, { addressIndex: index });
    const key = hd.getHdKey().privateKey;
    if (!key) throw new Error(`no private key for account ${index}`);
    acct = { address: hd.address, privateKey: toHex(key) };
    cache.set(index, acct);
  }
  return acct;
}

/** anvil's first `count` default accounts (each prefunded with 10,000 ETH by anvil). */
export function anvilAccounts(count = 10): DevAccount[] {
  return Array.from({ length: count }, (_, i) => derive(i));
}

/**
 * The devnet's token admin (USDC owner, master minter, pauser, blacklister, minter).
 * It is index 10 of the same mnemonic, deliberately outside the ten accounts handed
 * to tests, so setup transactions never consume those accounts' nonces or ETH.
 */
export function devnetAdmin(): PrivateKeyAccount {
  return privateKeyToAccount(derive(10).privateKey);
}
