// Proves the devnet is a faithful stand-in for Base: real USDC, Multicall3 and a
// real x402 "exact" payment settled on chain through the self-hosted facilitator.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { createPublicClient, domainSeparator, http, parseAbi, encodeFunctionData, decodeFunctionResult } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { HTTPFacilitatorClient } from '@x402/core/http';
import { FacilitatorTimeoutError, VerifyError, type PaymentPayload, type PaymentRequirements } from '@x402/core/types';
import { toClientEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import {
  BASE_NETWORK,
  FAULT_REASON,
  MULTICALL3_ADDRESS,
  USDC_ADDRESS,
  USDC_EIP712_DOMAIN,
  baseDevnetChain,
  fiatTokenAbi,
  startDevnet,
  type Devnet,
} from '../../src/devnet/index.js';

// aggregate3 is payable on chain; declaring it view (as viem's own multicall3Abi does)
// lets readContract eth_call it.
const multicallAbi = parseAbi([
  'struct Call3 { address target; bool allowFailure; bytes callData; }',
  'struct Result { bool success; bytes returnData; }',
  'function aggregate3(Call3[] calls) view returns (Result[] returnData)',
]);

let devnet: Devnet;
let pub: ReturnType<typeof createPublicClient>;

const balanceOf = (address: `0x${string}`) =>
  pub.readContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'balanceOf', args: [address] });

beforeAll(async () => {
  devnet = await startDevnet();
  pub = createPublicClient({ chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
}, 30_000);

afterAll(async () => {
  await devnet?.stop();
});

describe('devnet chain and contracts', () => {
  it('is chain 8453', async () => {
    expect(await pub.getChainId()).toBe(8453);
  });

  it('has FiatTokenV2_2 at the canonical Base USDC address with the Base metadata', async () => {
    const code = await pub.getCode({ address: USDC_ADDRESS });
    expect(code && code.length).toBeGreaterThan(1000);
    const read = <F extends 'name' | 'symbol' | 'decimals' | 'version'>(functionName: F) =>
      pub.readContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName });
    expect(await read('name')).toBe('USD Coin');
    expect(await read('symbol')).toBe('USDC');
    expect(await read('decimals')).toBe(6);
    expect(await read('version')).toBe('2');
    const separator = await pub.readContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'DOMAIN_SEPARATOR' });
    expect(separator).toBe(domainSeparator({ domain: USDC_EIP712_DOMAIN }));
  });

  it('funds each of the ten accounts with 1000 USDC', async () => {
    expect(devnet.accounts).toHaveLength(10);
    expect(devnet.accounts[0]?.address).toBe('0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266');
    for (const a of devnet.accounts) expect(await balanceOf(a.address)).toBe(1_000_000_000n);
  });

  it('serves Multicall3 aggregate3 at the canonical address', async () => {
    const [a0, a1] = devnet.accounts;
    const calls = [a0!, a1!].map((a) => ({
      target: USDC_ADDRESS,
      allowFailure: false,
      callData: encodeFunctionData({ abi: fiatTokenAbi, functionName: 'balanceOf', args: [a.address] }),
    }));
    const results = await pub.readContract({ address: MULTICALL3_ADDRESS, abi: multicallAbi, functionName: 'aggregate3', args: [calls] });
    expect(results).toHaveLength(2);
    for (const r of results) {
      expect(r.success).toBe(true);
      expect(decodeFunctionResult({ abi: fiatTokenAbi, functionName: 'balanceOf', data: r.returnData })).toBe(1_000_000_000n);
    }
    // viem's own multicall goes through the chain definition's multicall3 entry.
    const viaViem = await pub.multicall({
      contracts: [{ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'symbol' }],
      allowFailure: false,
    });
    expect(viaViem).toEqual(['USDC']);
  });
});

describe('x402 payment through the devnet facilitator', () => {
  let facilitatorClient: HTTPFacilitatorClient;

  const requirementsTo = (payTo: `0x${string}`): PaymentRequirements => ({
    scheme: 'exact',
    network: BASE_NETWORK,
    asset: USDC_ADDRESS,
    amount: '1000',
    payTo,
    maxTimeoutSeconds: 60,
    extra: { name: 'USD Coin', version: '2' },
  });

  async function pay(requirements: PaymentRequirements, payerIndex = 1): Promise<PaymentPayload> {
    const payer = privateKeyToAccount(devnet.accounts[payerIndex]!.privateKey);
    const client = new x402Client().register(BASE_NETWORK, new ExactEvmScheme(toClientEvmSigner(payer, pub)));
    return client.createPaymentPayload({
      x402Version: 2,
      resource: { url: 'http://devnet.test/resource' },
      accepts: [requirements],
    });
  }

  beforeAll(() => {
    facilitatorClient = new HTTPFacilitatorClient({ url: devnet.facilitatorUrl });
  });

  it('advertises exact on eip155:8453 with the account-9 signer', async () => {
    const supported = await facilitatorClient.getSupported();
    expect(supported.kinds).toContainEqual({ x402Version: 2, scheme: 'exact', network: BASE_NETWORK });
    expect(supported.signers['eip155:*']).toEqual([devnet.accounts[9]!.address]);
  });

  it('verifies and settles a real EIP-3009 payment on chain', async () => {
    const payer = devnet.accounts[1]!.address;
    const payee = devnet.accounts[2]!.address;
    const requirements = requirementsTo(payee);
    const payload = await pay(requirements);
    const before = { payer: await balanceOf(payer), payee: await balanceOf(payee) };

    const verified = await facilitatorClient.verify(payload, requirements);
    expect(verified).toMatchObject({ isValid: true, payer });

    const settled = await facilitatorClient.settle(payload, requirements);
    expect(settled).toMatchObject({ success: true, network: BASE_NETWORK, payer });
    expect(settled.transaction).toMatch(/^0x[0-9a-f]{64}$/);

    const receipt = await pub.getTransactionReceipt({ hash: settled.transaction as `0x${string}` });
    expect(receipt.status).toBe('success');
    expect(receipt.from.toLowerCase()).toBe(devnet.accounts[9]!.address.toLowerCase());
    expect(await balanceOf(payee)).toBe(before.payee + 1000n);
    expect(await balanceOf(payer)).toBe(before.payer - 1000n);

    // The authorization nonce is now spent on chain, so the same payload cannot settle twice.
    const replay = await facilitatorClient.settle(payload, requirements);
    expect(replay).toMatchObject({ success: false, errorReason: 'invalid_exact_evm_nonce_already_used' });
    expect(await balanceOf(payee)).toBe(before.payee + 1000n);
  });

  it('settles concurrent payments without facilitator nonce clashes', async () => {
    const payee = devnet.accounts[6]!.address;
    const requirements = requirementsTo(payee);
    const payloads = await Promise.all([4, 5, 7].map((i) => pay(requirements, i)));
    const results = await Promise.all(payloads.map((p) => facilitatorClient.settle(p, requirements)));
    for (const r of results) expect(r.success).toBe(true);
    expect(new Set(results.map((r) => r.transaction)).size).toBe(3);
    expect(await balanceOf(payee)).toBe(1_000_000_000n + 3000n);
  });

  it('injects verify/settle failures and delays at runtime', async () => {
    const payee = devnet.accounts[3]!.address;
    const requirements = requirementsTo(payee);
    const payload = await pay(requirements);
    const fac = devnet.facilitator;
    try {
      fac.setFaults({ failVerify: true });
      expect(await facilitatorClient.verify(payload, requirements)).toMatchObject({ isValid: false, invalidReason: FAULT_REASON });

      fac.setFaults({ failVerify: true, failStatus: 503 });
      await expect(facilitatorClient.verify(payload, requirements)).rejects.toBeInstanceOf(VerifyError);

      fac.setFaults({ failSettle: true });
      expect(await facilitatorClient.settle(payload, requirements)).toMatchObject({ success: false, errorReason: FAULT_REASON });
      expect(await balanceOf(payee)).toBe(1_000_000_000n);

      fac.setFaults({ delayMs: 600 });
      const impatient = new HTTPFacilitatorClient({ url: devnet.facilitatorUrl, timeoutMs: 200 });
      await expect(impatient.verify(payload, requirements)).rejects.toBeInstanceOf(FacilitatorTimeoutError);
    } finally {
      fac.setFaults({});
    }
    // Faults cleared: the very same payload still settles for real.
    expect(await facilitatorClient.settle(payload, requirements)).toMatchObject({ success: true });
    expect(await balanceOf(payee)).toBe(1_000_001_000n);
    expect(fac.calls.settle).toBeGreaterThanOrEqual(4);
  });

  it('runs a second, independent devnet in the same process', async () => {
    // Same chain id and facilitator key as the first devnet: guards against state leaking
    // between instances (ports, nonce caches) when suites restart the devnet.
    const second = await startDevnet();
    try {
      expect(second.rpcUrl).not.toBe(devnet.rpcUrl);
      const secondPub = createPublicClient({ chain: baseDevnetChain(second.rpcUrl), transport: http(second.rpcUrl) });
      const payer = privateKeyToAccount(second.accounts[1]!.privateKey);
      const client = new x402Client().register(BASE_NETWORK, new ExactEvmScheme(toClientEvmSigner(payer, secondPub)));
      const requirements = requirementsTo(second.accounts[2]!.address);
      const payload = await client.createPaymentPayload({ x402Version: 2, resource: { url: 'http://devnet.test/2' }, accepts: [requirements] });
      const settled = await new HTTPFacilitatorClient({ url: second.facilitatorUrl }).settle(payload, requirements);
      expect(settled.success).toBe(true);
      const paid = await secondPub.readContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'balanceOf', args: [requirements.payTo as `0x${string}`] });
      expect(paid).toBe(1_000_001_000n);
    } finally {
      await second.stop();
    }
  }, 30_000);
});
