// The two chain reports against a real chain: anvil as Base with Circle's USDC, real
// transactions sent by viem wallets, and an RPC URL nobody listens on.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestClient, createWalletClient, http, parseAbi, parseSignature, toHex, type Address, type Hash, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { authorizationTypes } from '@x402/evm';
import { USDC_ADDRESS, USDC_EIP712_DOMAIN, baseDevnetChain, fiatTokenAbi, freePort, startDevnet, type Devnet } from '../../src/devnet/index.js';
import { PaymentProofReport, paymentProof } from '../../src/features/reports/payment-proof.js';
import { QuickCheckReport, quickCheck } from '../../src/features/reports/quick-check.js';
import { UPSTREAM_DETAIL, createChainClient, type ChainClient } from '../../src/platform/chain.js';
import { AppError } from '../../src/platform/errors.js';
import { startHttpProxy } from '../helpers/paid.js';
import { expectMatchesSchema } from '../helpers/schema.js';
import { expectWrongChain } from '../helpers/wrong-chain.js';

const eip3009Abi = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
]);
const NOW = new Date('2026-01-15T12:00:00.000Z');

let devnet: Devnet;
let chain: ChainClient;
let test: ReturnType<typeof createTestClient>;
let addr: (i: number) => Address;

const wallet = (i: number) =>
  createWalletClient({ account: privateKeyToAccount(devnet.accounts[i]!.privateKey), chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });

async function transfer(from: number, to: number, value: bigint, gas?: bigint): Promise<Hash> {
  return wallet(from).writeContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'transfer', args: [addr(to), value], ...(gas ? { gas } : {}) });
}

// Every report produced here must also satisfy its published response schema, which declares
// every property it carries.
async function prove(txHash: Hash, expected: { to: Address; amount: string; from?: Address }, minConfirmations = 1, on: ChainClient = chain) {
  const body = { chain: 'base' as const, txHash, expectedTo: expected.to, expectedAmount: expected.amount, ...(expected.from ? { expectedFrom: expected.from } : {}) };
  const report = await paymentProof(on, body, minConfirmations, NOW);
  expectMatchesSchema(PaymentProofReport, report);
  return report;
}

async function deadUrl(): Promise<string> {
  // A path segment that looks like a provider API key, to prove it never reaches the caller.
  return `http://127.0.0.1:${await freePort()}/v2/sk-secret-rpc-key`;
}

async function expect502(p: Promise<unknown>): Promise<void> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(AppError);
  const app = err as AppError;
  expect(app).toMatchObject({ code: 'upstream_unavailable', status: 502, message: UPSTREAM_DETAIL });
  expect(app.message).not.toMatch(/127\.0\.0\.1|secret/);
  // The log-side cause is useful but redacted too.
  expect(String((app.cause as Error).message)).not.toMatch(/127\.0\.0\.1|secret/);
}

beforeAll(async () => {
  devnet = await startDevnet();
  chain = createChainClient({ rpcUrls: [devnet.rpcUrl], rpcTimeoutMs: 5000 });
  test = createTestClient({ mode: 'anvil', chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  addr = (i) => devnet.accounts[i]!.address;
}, 60_000);

afterAll(async () => {
  await devnet?.stop();
});

describe('quick check', () => {
  it('PASSes on Base with the official USDC contract in place', async () => {
    const report = await quickCheck(chain, NOW);
    expectMatchesSchema(QuickCheckReport, report);
    expect(report).toEqual({
      service: 'paywarden quick check',
      network: 'eip155:8453',
      status: 'PASS',
      checks: { chainId: { expected: 8453, observed: 8453, match: true }, usdcContract: { address: USDC_ADDRESS, codePresent: true } },
      checkedAt: NOW.toISOString(),
      note: 'Chain identity and official USDC contract presence only; not a token-risk report, simulation, payment proof or contract audit.',
    });
  });

  it('FAILs when there is no code at the USDC address', async () => {
    const code = await chain.getCode({ address: USDC_ADDRESS });
    await test.setCode({ address: USDC_ADDRESS, bytecode: '0x' });
    try {
      const report = await quickCheck(chain, NOW);
      expect(report.status).toBe('FAIL');
      expect(report.checks).toEqual({
        chainId: { expected: 8453, observed: 8453, match: true },
        usdcContract: { address: USDC_ADDRESS, codePresent: false },
      });
    } finally {
      await test.setCode({ address: USDC_ADDRESS, bytecode: code! });
    }
    expect((await quickCheck(chain, NOW)).status).toBe('PASS');
  });

  it('answers 502 without leaking the RPC URL when nobody listens', async () => {
    await expect502(quickCheck(createChainClient({ rpcUrls: [await deadUrl()], rpcTimeoutMs: 2000 }), NOW));
  });

  it('falls over to the next RPC URL in order', async () => {
    const both = createChainClient({ rpcUrls: [await deadUrl(), devnet.rpcUrl], rpcTimeoutMs: 2000 });
    expect((await quickCheck(both, NOW)).status).toBe('PASS');
  });
});

describe('payment proof', () => {
  it('VERIFIES a direct transfer of 1.5 USDC from account 1 to account 2', async () => {
    const hash = await transfer(1, 2, 1_500_000n);
    const receipt = await chain.waitForTransactionReceipt({ hash });
    const report = await prove(hash, { to: addr(2), amount: '1.5', from: addr(1) });
    expect(report).toEqual({
      verdict: { decision: 'VERIFIED', verified: true },
      reason: 'USDC transfer of the expected amount to the expected recipient from the expected sender',
      txHash: hash,
      chain: 'base',
      network: 'eip155:8453',
      confirmations: 1,
      finality: 'latest',
      blockNumber: Number(receipt.blockNumber),
      transfers: [{ from: addr(1), to: addr(2), amount: '1.5', logIndex: 0 }],
      mismatches: [],
      expected: { to: addr(2), amount: '1.5', from: addr(1) },
      checkedAt: NOW.toISOString(),
    });
    // Addresses and the hash in any letter case, the amount with trailing zeros.
    const loose = await paymentProof(
      chain,
      { chain: 'base', txHash: hash.toUpperCase().replace('0X', '0x'), expectedTo: addr(2).toLowerCase(), expectedAmount: '01.500000' },
      1,
      NOW,
    );
    expect(loose).toMatchObject({ verdict: { decision: 'VERIFIED' }, txHash: hash, expected: { to: addr(2), amount: '1.5' } });
  });

  it('reports MISMATCH listing the amount, or the sender, that differs', async () => {
    const hash = await transfer(1, 2, 1_500_000n);
    const amount = await prove(hash, { to: addr(2), amount: '1.500001' });
    expect(amount).toMatchObject({ verdict: { decision: 'MISMATCH', verified: false }, mismatches: [{ field: 'amount', expected: '1.500001', observed: '1.5' }] });
    expect(amount.transfers).toEqual([{ from: addr(1), to: addr(2), amount: '1.5', logIndex: 0 }]);
    const from = await prove(hash, { to: addr(2), amount: '1.5', from: addr(3) });
    expect(from).toMatchObject({ verdict: { decision: 'MISMATCH', verified: false }, mismatches: [{ field: 'from', expected: addr(3), observed: addr(1) }] });
  });

  it('VERIFIES a transferWithAuthorization sent by a relayer, with the authorizer as sender', async () => {
    const payer = privateKeyToAccount(devnet.accounts[1]!.privateKey);
    const message = { from: payer.address, to: addr(2), value: 1_500_000n, validAfter: 0n, validBefore: 2n ** 48n, nonce: toHex(crypto.getRandomValues(new Uint8Array(32))) };
    const signature = await payer.signTypedData({
      domain: USDC_EIP712_DOMAIN,
      primaryType: 'TransferWithAuthorization',
      types: authorizationTypes,
      message,
    });
    const { r, s, v } = parseSignature(signature);
    const hash = await wallet(3).writeContract({
      address: USDC_ADDRESS,
      abi: eip3009Abi,
      functionName: 'transferWithAuthorization',
      args: [message.from, message.to, message.value, message.validAfter, message.validBefore, message.nonce, Number(v), r, s],
    });
    const receipt = await chain.waitForTransactionReceipt({ hash });
    expect(receipt.from.toLowerCase()).toBe(addr(3).toLowerCase()); // the relayer sent it
    const report = await prove(hash, { to: addr(2), amount: '1.5', from: addr(1) });
    expect(report.verdict).toEqual({ decision: 'VERIFIED', verified: true });
    // FiatToken emits AuthorizationUsed (log 0) before the Transfer (log 1); only the Transfer counts.
    expect(report.transfers).toEqual([{ from: addr(1), to: addr(2), amount: '1.5', logIndex: 1 }]);
    // The relayer is not the payer.
    expect((await prove(hash, { to: addr(2), amount: '1.5', from: addr(3) })).mismatches).toEqual([{ field: 'from', expected: addr(3), observed: addr(1) }]);
  });

  it('reports FAILED for a mined USDC transfer that reverted', async () => {
    // Above the 1000 USDC balance; a manual gas limit skips estimation so the node mines it.
    const hash = await transfer(4, 2, 2_000_000_000n, 100_000n);
    expect((await chain.waitForTransactionReceipt({ hash })).status).toBe('reverted');
    const report = await prove(hash, { to: addr(2), amount: '2000' });
    expect(report).toMatchObject({ verdict: { decision: 'FAILED', verified: false }, reason: 'transaction reverted', transfers: [], mismatches: [], confirmations: 1 });
  });

  it('reports NOT_FOUND for a hash the chain does not know', async () => {
    const hash = toHex(crypto.getRandomValues(new Uint8Array(32))) as Hash;
    const report = await prove(hash, { to: addr(2), amount: '1.5' });
    expect(report).toMatchObject({ verdict: { decision: 'NOT_FOUND', verified: false }, confirmations: 0, finality: null, blockNumber: null, transfers: [] });
  });

  it('reports PENDING below MIN_CONFIRMATIONS, then VERIFIED once blocks are mined on top', async () => {
    const hash = await transfer(1, 2, 1_500_000n);
    await chain.waitForTransactionReceipt({ hash });
    const early = await prove(hash, { to: addr(2), amount: '1.5' }, 3);
    expect(early).toMatchObject({ verdict: { decision: 'PENDING', verified: false }, reason: '1 of 3 required confirmations', confirmations: 1 });
    expect(early.transfers).toHaveLength(1);
    await test.mine({ blocks: 2 });
    const later = await prove(hash, { to: addr(2), amount: '1.5' }, 3);
    expect(later).toMatchObject({ verdict: { decision: 'VERIFIED', verified: true }, confirmations: 3, finality: 'latest' });
  });

  it('reports PENDING for a transaction still in the mempool', async () => {
    await test.setAutomine(false);
    try {
      const hash = await transfer(5, 2, 1_500_000n);
      const report = await prove(hash, { to: addr(2), amount: '1.5' }, 0);
      expect(report).toMatchObject({ verdict: { decision: 'PENDING', verified: false }, reason: 'transaction not yet mined', confirmations: 0, blockNumber: null });
      await test.mine({ blocks: 1 });
      expect((await prove(hash, { to: addr(2), amount: '1.5' }, 0)).verdict.decision).toBe('VERIFIED');
    } finally {
      await test.setAutomine(true);
    }
  });

  it("labels finality from the node's safe and finalized heads", async () => {
    // anvil puts `safe` 32 and `finalized` 64 blocks below the head.
    const hash = await transfer(1, 2, 1_500_000n);
    await chain.waitForTransactionReceipt({ hash });
    const labels: (string | null)[] = [];
    for (const blocks of [0, 32, 32]) {
      if (blocks) await test.mine({ blocks });
      labels.push((await prove(hash, { to: addr(2), amount: '1.5' })).finality);
    }
    expect(labels).toEqual(['latest', 'safe', 'finalized']);
  });

  it('answers 502 without leaking the RPC URL when nobody listens', async () => {
    const dead = createChainClient({ rpcUrls: [await deadUrl()], rpcTimeoutMs: 2000 });
    await expect502(prove(`0x${'ab'.repeat(32)}` as Hex, { to: addr(2), amount: '1.5' }, 1, dead));
  });

  it('answers 502, not a verdict, when the configured RPC serves another chain than Base', async () => {
    const hash = await transfer(1, 2, 1_500_000n);
    await test.mine({ blocks: 1 });
    // The same node, but saying it is chain 1: what it knows of this transfer is not Base's.
    const proxy = await startHttpProxy(devnet.rpcUrl, async (req, forward) => {
      const message = JSON.parse(req.body) as { id: number; method: string };
      return message.method === 'eth_chainId' ? { status: 200, body: JSON.stringify({ jsonrpc: '2.0', id: message.id, result: '0x1' }) } : forward();
    });
    try {
      const elsewhere = createChainClient({ rpcUrls: [proxy.url], rpcTimeoutMs: 5000 });
      const err = await prove(hash, { to: addr(2), amount: '1.5' }, 1, elsewhere).then(() => undefined, (e: unknown) => e);
      expectWrongChain(err, 1);
      // Asked again, the same: a wrong chain is never taken for Base later.
      await expect(prove(hash, { to: addr(2), amount: '1.5' }, 1, elsewhere)).rejects.toMatchObject({ code: 'upstream_unavailable' });
    } finally {
      await proxy.close();
    }
    expect((await prove(hash, { to: addr(2), amount: '1.5' })).verdict.decision).toBe('VERIFIED');
  });
});
