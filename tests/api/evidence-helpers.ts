import { expect } from 'vitest';
import { ADDR, createTestApp, json, type TestApp } from '../helpers/app.js';
import { AGENT, bearer, createPolicy, rid, type Created } from '../helpers/policies.js';
import type { Config } from '../../src/config.js';
import { MULTICALL3_ADDRESS, USDC_ADDRESS, baseDevnetChain, startDevnet, type Devnet } from '../../src/devnet/index.js';
import type { JwksDocument } from '../../src/features/evidence/verify.js';
import { PolicyStore } from '../../src/features/spend-policy/policies.js';
import { createWalletClient, encodeFunctionData, http, parseAbi, type Address, type Hash, type Hex, type PublicClient } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';

/** Helpers of the evidence-chain API tests. */

export const CHAINS = '/api/evidence-chains';
export const CHAIN_ID_RE = /^ec_[0-9a-f]{32}$/;
export const EVIDENCE_ID_RE = /^ev_[0-9a-f]{32}$/;
export const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
export const UNKNOWN_CHAIN_ID = `ec_${'0'.repeat(32)}`;

/** What the devnet tests send to USDC: plain transfers, pulls, approvals and EIP-3009 authorizations. */
export const usdcAbi = parseAbi([
  'function transfer(address to, uint256 value) returns (bool)',
  'function transferFrom(address from, address to, uint256 value) returns (bool)',
  'function approve(address spender, uint256 value) returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
]);
/** Multicall3's aggregate3, to make one transaction carry several Transfers. */
export const multicallAbi = parseAbi([
  'struct Call3 { address target; bool allowFailure; bytes callData; }',
  'struct Result { bool success; bytes returnData; }',
  'function aggregate3(Call3[] calls) payable returns (Result[] returnData)',
]);

/**
 * Sending on the devnet by account index: a wallet, a transaction mined before it resolves, and
 * the USDC calldata the model tests build their transactions from (a pull through Multicall3
 * needs the sender's approval of MULTICALL3_ADDRESS first).
 */
export function devnetSender(devnet: Devnet, pub: Pick<PublicClient, 'waitForTransactionReceipt'>, pollingInterval = 50) {
  const addr = (i: number): Address => devnet.accounts[i]!.address;
  const wallet = (i: number) =>
    createWalletClient({ account: privateKeyToAccount(devnet.accounts[i]!.privateKey), chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  return {
    wallet,
    async send(from: number, to: Address, data: Hex, gas?: bigint): Promise<Hash> {
      const hash = await wallet(from).sendTransaction({ to, data, ...(gas ? { gas } : {}) });
      await pub.waitForTransactionReceipt({ hash, pollingInterval });
      return hash;
    },
    transfer: (to: number, micro: bigint) => encodeFunctionData({ abi: usdcAbi, functionName: 'transfer', args: [addr(to), micro] }),
    transferFrom: (from: number, to: number, micro: bigint) =>
      encodeFunctionData({ abi: usdcAbi, functionName: 'transferFrom', args: [addr(from), addr(to), micro] }),
    approveMulticall: (micro: bigint) => encodeFunctionData({ abi: usdcAbi, functionName: 'approve', args: [MULTICALL3_ADDRESS, micro] }),
    multicall: (calls: Hex[]) =>
      encodeFunctionData({ abi: multicallAbi, functionName: 'aggregate3', args: [calls.map((callData) => ({ target: USDC_ADDRESS, allowFailure: false, callData }))] }),
  };
}

export interface IntentBody {
  policyId: string;
  agentId: string;
  requestId: string;
  chain: string;
  asset: string;
  recipient: string;
  amount: string;
  expectedFrom?: string;
  [k: string]: unknown;
}

export function intentBody(policyId: string, overrides: Partial<IntentBody> = {}): IntentBody {
  return { policyId, agentId: AGENT, requestId: rid('ec'), chain: 'base', asset: 'USDC', recipient: ADDR.alice, amount: '5', ...overrides };
}

const auth = (key: string | undefined) => (key ? bearer(key) : {});

export function createChainRaw(t: TestApp, key: string | undefined, body: unknown) {
  return t.app.inject({ method: 'POST', url: CHAINS, headers: auth(key), payload: body as Record<string, unknown> });
}

/** Creates a chain expecting 201; returns the creation answer. */
export async function createChain(t: TestApp, p: { policyId: string; agentKey: string }, overrides: Partial<IntentBody> = {}) {
  const res = await createChainRaw(t, p.agentKey, intentBody(p.policyId, overrides));
  expect(res.statusCode, res.body).toBe(201);
  return json(res);
}

export const readChain = (t: TestApp, id: string, key: string | undefined) =>
  t.app.inject({ method: 'GET', url: `${CHAINS}/${id}`, headers: auth(key) });

export const readSummary = (t: TestApp, id: string, key: string | undefined) =>
  t.app.inject({ method: 'GET', url: `${CHAINS}/${id}/summary`, headers: auth(key) });

export const settle = (t: TestApp, id: string, key: string | undefined, body: unknown) =>
  t.app.inject({ method: 'POST', url: `${CHAINS}/${id}/settlement`, headers: auth(key), payload: body as Record<string, unknown> });

export const attachPreflight = (t: TestApp, id: string, key: string | undefined, body: unknown) =>
  t.app.inject({ method: 'POST', url: `${CHAINS}/${id}/preflight`, headers: auth(key), payload: body as Record<string, unknown> });

export async function serviceJwks(t: TestApp): Promise<JwksDocument> {
  const res = await t.app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
  expect(res.statusCode).toBe(200);
  return json(res);
}

/** A random transaction hash no chain knows. */
export const randomTxHash = () => `0x${Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('hex')}`;

/** A policy for evidence chains (any recipient, generous limits) with the operator's direct checks on. */
export async function createPilotPolicy(t: TestApp): Promise<Created> {
  const p = await createPolicy(t, { allowedRecipients: [], blockUnknownRecipients: false, requireHumanAbove: '1000', maxPerTransaction: '1000', dailyBudget: '100000' });
  await new PolicyStore(t.database).setDirectChecks(p.policyId, true, t.clock.now());
  return p;
}

/**
 * anvil as Base and the service reading it (with `config` on top), and a policy with direct
 * checks on that lets any recipient through up to 1000 USDC a payment.
 */
export async function startEvidenceDevnet(config: Partial<Config> = {}): Promise<{ devnet: Devnet; t: TestApp; p: Created }> {
  const devnet = await startDevnet();
  let t: TestApp | undefined;
  try {
    t = await createTestApp({ config: { rpcUrls: [devnet.rpcUrl], ...config } });
    return { devnet, t, p: await createPilotPolicy(t) };
  } catch (err) {
    await t?.close().catch(() => {});
    await devnet.stop().catch(() => {});
    throw err;
  }
}
