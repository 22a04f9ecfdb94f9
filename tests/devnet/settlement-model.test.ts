// End-to-end sample of the settlement model: real transactions on the devnet (anvil as Base with
// Circle's FiatToken at the canonical USDC address), reconciled over HTTP through
// POST /api/evidence-chains/{id}/settlement, each answer checked against the reference model in
// tests/unit/settlement-model.ts fed with the receipt and head the chain really has, and the
// result checked in the chain's events and its summary.
//
// The service runs with MIN_CONFIRMATIONS = 2: every transaction is reconciled once in its own
// block (1 confirmation: PENDING), then once more after one block (confirmations exactly equal
// to the depth: the final result).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createPublicClient,
  createTestClient,
  encodeFunctionData,
  http,
  parseSignature,
  TransactionNotFoundError,
  TransactionReceiptNotFoundError,
  type Address,
  type Hash,
  type Hex,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { MULTICALL3_ADDRESS, USDC_ADDRESS, USDC_EIP712_DOMAIN, baseDevnetChain, type Devnet } from '../../src/devnet/index.js';
import { json, type TestApp } from '../helpers/app.js';
import { testDialect } from '../helpers/db.js';
import type { Created } from '../helpers/policies.js';
import { createChain, createPilotPolicy, devnetSender, randomTxHash, readChain, readSummary, settle, startEvidenceDevnet, usdcAbi } from '../api/evidence-helpers.js';
import { TRANSFER_TOPIC, judge, mismatchKey, modelSettle, type ModelIntent, type ModelObservation } from '../unit/settlement-model.js';

const REQUIRED = 2;
/** A "token" that is not USDC: transfer(to, value) emits a perfect Transfer(caller, to, value) and moves nothing. */
const FAKE_TOKEN = '0x00000000000000000000000000000000fa4e7041' as Address;
const FAKE_TOKEN_CODE = `0x602435600052600435337f${TRANSFER_TOPIC.slice(2)}60206000a3600160005260206000f3` as Hex;

let devnet: Devnet;
let t: TestApp;
let p: Created;
let pub: ReturnType<typeof createPublicClient>;
let test: ReturnType<typeof createTestClient>;
const addr = (i: number): Address => devnet.accounts[i]!.address;
const PAYER = 1;
const RECIPIENT = 2;
const RELAYER = 3;
const OTHER = 4;
const STRANGER = 5;

let sender: ReturnType<typeof devnetSender>;
const wallet = (i: number) => sender.wallet(i);
const send = (from: number, to: Address, data: Hex, gas?: bigint) => sender.send(from, to, data, gas);
const transfer = (to: number, micro: bigint) => sender.transfer(to, micro);
const transferFrom = (from: number, to: number, micro: bigint) => sender.transferFrom(from, to, micro);
const multicall = (calls: Hex[]) => sender.multicall(calls);

/** What the chain shows for `hash` right now, in the model's terms. */
async function observe(hash: Hash): Promise<ModelObservation> {
  const head = await pub.getBlockNumber({ cacheTime: 0 });
  const receipt = await pub.getTransactionReceipt({ hash }).catch((e: unknown) => {
    if (e instanceof TransactionReceiptNotFoundError) return null;
    throw e;
  });
  if (!receipt) {
    const tx = await pub.getTransaction({ hash }).catch((e: unknown) => {
      if (e instanceof TransactionNotFoundError) return null;
      throw e;
    });
    return { kind: tx ? 'pending' : 'not-found' };
  }
  return { kind: 'mined', status: receipt.status, blockNumber: receipt.blockNumber, head, logs: receipt.logs.map((l) => ({ address: l.address, topics: [...l.topics], data: l.data })) };
}

/** Reconciles `hash` on the chain and checks the HTTP answer, the chain's events and the summary against the model. */
async function reconcile(chainId: string, intent: ModelIntent, hash: Hash) {
  const res = await settle(t, chainId, p.agentKey, { txHash: hash });
  expect(res.statusCode, res.body).toBe(200);
  const answer = json(res);
  const obs = await observe(hash); // nothing is mined between the service's reading and this one
  expect(judge(obs, intent, REQUIRED, answer), JSON.stringify({ answer, obs }, (_k, v) => (typeof v === 'bigint' ? String(v) : v))).toBeNull();

  const events = json(await readChain(t, chainId, p.agentKey)).events as Array<{ evidenceId: string; eventType: string; body: Record<string, any> }>;
  const last = events.at(-1)!;
  expect(last.eventType).toBe('SETTLEMENT_RECONCILED');
  expect(last.evidenceId).toBe(answer.settlementEvidenceId);
  expect(last.body).toMatchObject({ txHash: hash.toLowerCase(), result: answer.result, requiredConfirmations: REQUIRED });
  expect(mismatchKey(last.body.mismatches)).toBe(mismatchKey(answer.mismatches));
  const summary = json(await readSummary(t, chainId, p.agentKey));
  expect(summary).toMatchObject({ reconciliation: answer.result, settlement: { evidenceId: answer.settlementEvidenceId, result: answer.result, txHash: hash.toLowerCase() } });
  expect(mismatchKey(summary.settlement.mismatches)).toBe(mismatchKey(answer.mismatches));
  return { answer, model: modelSettle(obs, intent, REQUIRED), events };
}

/** A new chain for `intent`, reconciled in the transaction's own block and again one block later. */
async function settleTwice(intent: ModelIntent, hash: Hash) {
  const { evidenceChainId } = await createChain(t, p, intent);
  const first = await reconcile(evidenceChainId, intent, hash);
  expect(first.answer.result).toBe('PENDING'); // 1 of 2 confirmations
  await test.mine({ blocks: 1 });
  const second = await reconcile(evidenceChainId, intent, hash);
  expect(second.answer.confirmations).toBe(REQUIRED);
  return { evidenceChainId, ...second };
}

beforeAll(async () => {
  ({ devnet, t, p } = await startEvidenceDevnet({ minConfirmations: REQUIRED }));
  pub = createPublicClient({ chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  sender = devnetSender(devnet, pub);
  test = createTestClient({ mode: 'anvil', chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  await test.setCode({ address: FAKE_TOKEN, bytecode: FAKE_TOKEN_CODE });
}, 120_000);

afterAll(async () => {
  await t?.close();
  await devnet?.stop();
});

describe.skipIf(testDialect !== 'sqlite')('settlement model, end to end on the devnet', () => {
  const intent = (over: Partial<ModelIntent> = {}): ModelIntent => ({ recipient: addr(RECIPIENT), amount: '1.50', expectedFrom: addr(PAYER), ...over });

  it('a plain USDC transfer from expectedFrom: MATCH at exactly the depth', async () => {
    const hash = await send(PAYER, USDC_ADDRESS, transfer(RECIPIENT, 1_500_000n));
    const { answer, evidenceChainId, events } = await settleTwice(intent({ recipient: addr(RECIPIENT).toLowerCase() }), hash);
    expect(answer).toMatchObject({ result: 'MATCH', mismatches: [] });
    // final: the same hash again is the recorded answer (nothing appended), another hash is 409
    await test.mine({ blocks: 3 });
    const again = json(await settle(t, evidenceChainId, p.agentKey, { txHash: hash.toUpperCase().replace('0X', '0x') }));
    expect(again).toMatchObject({ result: 'MATCH', replayed: true, settlementEvidenceId: answer.settlementEvidenceId, confirmations: REQUIRED });
    expect((await settle(t, evidenceChainId, p.agentKey, { txHash: randomTxHash() })).statusCode).toBe(409);
    expect(json(await readChain(t, evidenceChainId, p.agentKey)).events).toHaveLength(events.length);
  });

  it('the exact amount from another sender: MISMATCH expectedFrom; without expectedFrom: MATCH', async () => {
    const a = await send(STRANGER, USDC_ADDRESS, transfer(RECIPIENT, 1_500_000n));
    expect((await settleTwice(intent(), a)).answer.mismatches.map((m: any) => m.field)).toEqual(['expectedFrom']);
    const b = await send(STRANGER, USDC_ADDRESS, transfer(RECIPIENT, 1_500_000n));
    expect((await settleTwice(intent({ expectedFrom: undefined }), b)).answer.result).toBe('MATCH');
  });

  it('one micro-USDC short, and a 10^6 scale error: MISMATCH amount', async () => {
    const a = await send(PAYER, USDC_ADDRESS, transfer(RECIPIENT, 1_499_999n));
    expect((await settleTwice(intent(), a)).answer.mismatches).toEqual([{ field: 'amount', expected: '1.5', observed: '1.499999' }]);
    const b = await send(PAYER, USDC_ADDRESS, transfer(RECIPIENT, 15_000_000n));
    expect((await settleTwice(intent({ amount: '0.000015' }), b)).answer.mismatches.map((m: any) => m.field)).toEqual(['amount']);
  });

  it('a perfect Transfer from a contract that is not USDC: not a MATCH', async () => {
    const hash = await send(PAYER, FAKE_TOKEN, transfer(RECIPIENT, 1_500_000n));
    const receipt = await pub.getTransactionReceipt({ hash });
    expect(receipt.logs).toHaveLength(1); // the fake Transfer(payer, recipient, 1.5) is really there
    const { answer } = await settleTwice(intent(), hash);
    expect(answer).toMatchObject({ result: 'MISMATCH', mismatches: [] });
  });

  it('a multicall paying the recipient in two partial transfers that sum to the amount: MISMATCH amount', async () => {
    await send(PAYER, USDC_ADDRESS, sender.approveMulticall(100_000_000n));
    const hash = await send(PAYER, MULTICALL3_ADDRESS, multicall([transferFrom(PAYER, RECIPIENT, 750_000n), transferFrom(PAYER, RECIPIENT, 750_000n)]));
    expect((await pub.getTransactionReceipt({ hash })).logs.filter((l) => l.topics[0] === TRANSFER_TOPIC)).toHaveLength(2);
    const { answer } = await settleTwice(intent(), hash);
    expect(answer.result).toBe('MISMATCH');
    expect(answer.mismatches.map((m: any) => m.field)).toEqual(['amount']);
  });

  it('a contract calling transfer twice, one exact plus an unrelated one: MATCH', async () => {
    const hash = await send(PAYER, MULTICALL3_ADDRESS, multicall([transferFrom(PAYER, OTHER, 300_000n), transferFrom(PAYER, RECIPIENT, 1_500_000n)]));
    expect((await settleTwice(intent(), hash)).answer.result).toBe('MATCH');
  });

  it('a contract paying the exact amount twice settles two chains of the policy, not a third', async () => {
    const hash = await send(PAYER, MULTICALL3_ADDRESS, multicall([transferFrom(PAYER, RECIPIENT, 1_500_000n), transferFrom(PAYER, RECIPIENT, 1_500_000n)]));
    const first = await settleTwice(intent(), hash);
    const second = { evidenceChainId: (await createChain(t, p, intent())).evidenceChainId } as { evidenceChainId: string; answer: { result: string } };
    second.answer = (await reconcile(second.evidenceChainId, intent(), hash)).answer; // already at the depth
    expect([first.answer.result, second.answer.result]).toEqual(['MATCH', 'MATCH']);
    // README: "a transfer another chain of the same policy already reconciled as MATCH gives MISMATCH naming that chain"
    const { evidenceChainId } = await createChain(t, p, intent());
    const third = json(await settle(t, evidenceChainId, p.agentKey, { txHash: hash }));
    expect(third.result).toBe('MISMATCH');
    expect(third.reason).toMatch(new RegExp(`${first.evidenceChainId}|${second.evidenceChainId}`));
  });

  it('a reverted transfer: PENDING below the depth, FAILED at it', async () => {
    const hash = await send(OTHER, USDC_ADDRESS, transfer(RECIPIENT, 2_000_000_000n), 100_000n);
    expect((await pub.getTransactionReceipt({ hash })).status).toBe('reverted');
    expect((await settleTwice(intent(), hash)).answer).toMatchObject({ result: 'FAILED', reason: 'transaction reverted' });
  });

  it('transferWithAuthorization signed by the payer and sent by a relayer: MATCH from the payer', async () => {
    const payer = privateKeyToAccount(devnet.accounts[PAYER]!.privateKey);
    const message = { from: addr(PAYER), to: addr(RECIPIENT), value: 1_500_000n, validAfter: 0n, validBefore: 2n ** 48n, nonce: `0x${'5a'.repeat(32)}` as Hex };
    const signature = await payer.signTypedData({
      domain: USDC_EIP712_DOMAIN,
      types: {
        TransferWithAuthorization: [
          { name: 'from', type: 'address' },
          { name: 'to', type: 'address' },
          { name: 'value', type: 'uint256' },
          { name: 'validAfter', type: 'uint256' },
          { name: 'validBefore', type: 'uint256' },
          { name: 'nonce', type: 'bytes32' },
        ],
      },
      primaryType: 'TransferWithAuthorization',
      message,
    });
    const { r, s, yParity } = parseSignature(signature);
    const data = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [message.from, message.to, message.value, message.validAfter, message.validBefore, message.nonce, 27 + (yParity ?? 0), r, s],
    });
    const hash = await send(RELAYER, USDC_ADDRESS, data);
    const receipt = await pub.getTransactionReceipt({ hash });
    expect(receipt.status).toBe('success');
    expect(receipt.from.toLowerCase()).toBe(addr(RELAYER).toLowerCase());
    expect((await settleTwice(intent(), hash)).answer.result).toBe('MATCH');
  });

  it('a hash no node knows: UNKNOWN; a transaction still in the mempool: PENDING, then MATCH', async () => {
    const unknown = intent();
    const { evidenceChainId } = await createChain(t, p, unknown);
    expect((await reconcile(evidenceChainId, unknown, randomTxHash() as Hash)).answer.result).toBe('UNKNOWN');

    await test.setAutomine(false);
    let hash: Hash;
    try {
      hash = await wallet(PAYER).sendTransaction({ to: USDC_ADDRESS, data: transfer(RECIPIENT, 1_500_000n), gas: 100_000n });
      // the UNKNOWN chain may be reconciled again, with another hash
      expect((await reconcile(evidenceChainId, unknown, hash)).answer.result).toBe('PENDING');
    } finally {
      await test.setAutomine(true);
    }
    await test.mine({ blocks: 1 });
    await pub.waitForTransactionReceipt({ hash, pollingInterval: 50 });
    let { answer, events } = await reconcile(evidenceChainId, unknown, hash); // checked against the model, whatever the depth
    if (answer.result !== 'MATCH') {
      await test.mine({ blocks: 1 });
      ({ answer, events } = await reconcile(evidenceChainId, unknown, hash));
    }
    expect(answer.result).toBe('MATCH');
    const results = events.filter((e) => e.eventType === 'SETTLEMENT_RECONCILED').map((e) => e.body.result);
    expect(results.slice(0, 2)).toEqual(['UNKNOWN', 'PENDING']);
    expect(results.at(-1)).toBe('MATCH');
  });

  // A transaction mined before its intent existed is no payment of it: anyone's earlier payment of
  // that amount to that recipient would do otherwise. The service's clock is moved to a day after
  // the block (and a policy created then), so the chain is created long after the transfer.
  it('a transfer mined before the chain (and its intent) existed is MISMATCH of minedAt, not MATCH', async () => {
    const hash = await send(PAYER, USDC_ADDRESS, transfer(RECIPIENT, 7_770_000n));
    await test.mine({ blocks: 5 });
    const block = await pub.getBlock({ blockNumber: (await pub.getTransactionReceipt({ hash })).blockNumber });
    const minedAt = new Date(Number(block.timestamp) * 1000);
    const saved = t.clock.now();
    t.clock.set(new Date(minedAt.getTime() + 86_400_000));
    try {
      const later = await createPilotPolicy(t);
      const { evidenceChainId } = await createChain(t, later, intent({ amount: '7.77' }));
      const res = await settle(t, evidenceChainId, later.agentKey, { txHash: hash });
      expect(res.statusCode).toBe(200);
      const answer = json<{ result: string; mismatches: Array<{ field: string; observed: string }> }>(res);
      expect(answer.result).toBe('MISMATCH');
      expect(answer.mismatches).toEqual([expect.objectContaining({ field: 'minedAt', observed: minedAt.toISOString() })]);
    } finally {
      t.clock.set(saved);
    }
  });
});
