// Settlement reconciliation against real transactions: anvil as Base with Circle's USDC. Runs on
// SQLite and PostgreSQL, because who wins a conflicting submission is the database's business.
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestClient, createWalletClient, encodeFunctionData, http, parseAbi, type Address, type Hash } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { USDC_ADDRESS, baseDevnetChain, fiatTokenAbi, freePort, type Devnet } from '../../src/devnet/index.js';
import { verifyChain } from '../../src/features/evidence/verify.js';
import { createChainClient, type ChainClient } from '../../src/platform/chain.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { expectProblem } from '../helpers/problems.js';
import type { Created } from '../helpers/policies.js';
import { EVIDENCE_ID_RE, createChain, createPilotPolicy, randomTxHash, readChain, readSummary, serviceJwks, startEvidenceDevnet, settle } from './evidence-helpers.js';

let devnet: Devnet;
let chain: ChainClient;
let t: TestApp;
let p: Created;
const addr = (i: number): Address => devnet.accounts[i]!.address;
const MULTICALL3: Address = '0xcA11bde05977b3631167028862bE2a173976CA11';
const multicall3Abi = parseAbi(['function aggregate3((address target, bool allowFailure, bytes callData)[] calls) payable returns ((bool success, bytes returnData)[] returnData)']);
const erc20Abi = parseAbi(['function approve(address spender, uint256 value) returns (bool)', 'function transferFrom(address from, address to, uint256 value) returns (bool)']);

/** A wallet client of devnet account `i`. */
const walletOf = (i: number) => createWalletClient({ account: privateKeyToAccount(devnet.accounts[i]!.privateKey), chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });

async function transfer(from: number, to: number, micro: bigint, gas?: bigint): Promise<Hash> {
  const hash = await walletOf(from).writeContract({ address: USDC_ADDRESS, abi: fiatTokenAbi, functionName: 'transfer', args: [addr(to), micro], ...(gas ? { gas } : {}) });
  await chain.waitForTransactionReceipt({ hash });
  return hash;
}

/** A chain paying account 2 `amount` USDC, optionally from `from`. */
async function chainFor(amount: string, from?: number) {
  return createChain(t, p, { recipient: addr(2), amount, ...(from !== undefined ? { expectedFrom: addr(from) } : {}) });
}

const settleOk = async (id: string, txHash: string, app: TestApp = t) => {
  const res = await settle(app, id, p.agentKey, { txHash });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
};
/** Another tenant: a policy of its own, with the direct checks on. */
const pilotPolicy = () => createPilotPolicy(t);
const settlementEvents = async (id: string) => json(await readChain(t, id, p.agentKey)).events.filter((e: any) => e.eventType === 'SETTLEMENT_RECONCILED');

beforeAll(async () => {
  ({ devnet, t, p } = await startEvidenceDevnet({ minConfirmations: 1 }));
  chain = createChainClient({ rpcUrls: [devnet.rpcUrl], rpcTimeoutMs: 5000 });
}, 120_000);

afterAll(async () => {
  await t?.close();
  await devnet?.stop();
});

describe('settlement reconciliation', () => {
  it('one payment settles one intent: a second chain naming the same transfer gets MISMATCH', async () => {
    const a = await chainFor('2.25');
    const b = await chainFor('2.25');
    const hash = await transfer(1, 2, 2_250_000n);
    expect(await settleOk(a.evidenceChainId, hash)).toMatchObject({ result: 'MATCH' });
    const second = await settleOk(b.evidenceChainId, hash);
    expect(second).toMatchObject({ result: 'MISMATCH', mismatches: [] });
    expect(second.reason).toContain(a.evidenceChainId);
    // The first chain's MATCH stands, and replays as it was.
    expect(await settleOk(a.evidenceChainId, hash)).toMatchObject({ result: 'MATCH', replayed: true });
    expect(json(await readSummary(t, b.evidenceChainId, p.agentKey))).toMatchObject({ reconciliation: 'MISMATCH' });
  });

  it("a payment another policy's chain reconciled first still settles this policy's intent: claims are per policy", async () => {
    // Anyone can create a policy: a griefer copies the recipient and amount of a public transfer
    // into an intent of their own and reconciles it before the rightful tenant does.
    const other = await pilotPolicy();
    const theirChain = () => createChain(t, other, { recipient: addr(2), amount: '3.25', expectedFrom: addr(1) });
    const mine = await chainFor('3.25', 1);
    const theirs = await theirChain();
    const hash = await transfer(1, 2, 3_250_000n);
    expect(json(await settle(t, theirs.evidenceChainId, other.agentKey, { txHash: hash }))).toMatchObject({ result: 'MATCH' });

    const res = await settle(t, mine.evidenceChainId, p.agentKey, { txHash: hash });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toMatchObject({ result: 'MATCH', mismatches: [], replayed: false });
    expect(res.body).not.toContain(theirs.evidenceChainId);
    expect(json(await readSummary(t, mine.evidenceChainId, p.agentKey))).toMatchObject({ reconciliation: 'MATCH' });

    // Within each policy the payment still settles one intent, and only that policy's chain is named.
    const again = await settleOk((await chainFor('3.25', 1)).evidenceChainId, hash);
    expect(again).toMatchObject({ result: 'MISMATCH', reason: expect.stringContaining(mine.evidenceChainId) });
    expect(again.reason).not.toContain(theirs.evidenceChainId);
    const theirAgain = json(await settle(t, (await theirChain()).evidenceChainId, other.agentKey, { txHash: hash }));
    expect(theirAgain).toMatchObject({ result: 'MISMATCH', reason: expect.stringContaining(theirs.evidenceChainId) });
  });

  it('two transfers in one transaction can settle two intents, one each', async () => {
    // Multicall3 batches two USDC transferFrom calls of one payer into one transaction.
    const payer = devnet.accounts[3]!;
    const wallet = walletOf(3);
    const a = await chainFor('0.75');
    const b = await chainFor('0.75');
    const approve = await wallet.writeContract({ address: USDC_ADDRESS, abi: erc20Abi, functionName: 'approve', args: [MULTICALL3, 1_500_000n] });
    await chain.waitForTransactionReceipt({ hash: approve });
    const call = { target: USDC_ADDRESS, allowFailure: false, callData: encodeFunctionData({ abi: erc20Abi, functionName: 'transferFrom', args: [payer.address, addr(2), 750_000n] }) };
    const hash = await wallet.writeContract({ address: MULTICALL3, abi: multicall3Abi, functionName: 'aggregate3', args: [[call, call]] });
    await chain.waitForTransactionReceipt({ hash });
    expect(await settleOk(a.evidenceChainId, hash)).toMatchObject({ result: 'MATCH' });
    expect(await settleOk(b.evidenceChainId, hash)).toMatchObject({ result: 'MATCH' });
    const c = await chainFor('0.75');
    expect(await settleOk(c.evidenceChainId, hash)).toMatchObject({ result: 'MISMATCH' });
  });

  it('two payers in one transaction settle an intent naming one payer and one naming none, in either order', async () => {
    // Each transaction: 2.5 USDC to account 2 from account 1, then 2.5 from account 3.
    for (const i of [1, 3]) await chain.waitForTransactionReceipt({ hash: await walletOf(i).writeContract({ address: USDC_ADDRESS, abi: erc20Abi, functionName: 'approve', args: [MULTICALL3, 5_000_000n] }) });
    const call = (from: number) => ({ target: USDC_ADDRESS, allowFailure: false, callData: encodeFunctionData({ abi: erc20Abi, functionName: 'transferFrom', args: [addr(from), addr(2), 2_500_000n] }) });
    for (const anyFirst of [true, false]) {
      const hash = await walletOf(1).writeContract({ address: MULTICALL3, abi: multicall3Abi, functionName: 'aggregate3', args: [[call(1), call(3)]] });
      await chain.waitForTransactionReceipt({ hash });
      const any = await chainFor('2.5');
      const fromOne = await chainFor('2.5', 1);
      // Reconciled first, the chain naming no payer took account 1's transfer, the only one that
      // pays the other chain, which then got a final MISMATCH: it now moves to account 3's.
      for (const c of anyFirst ? [any, fromOne] : [fromOne, any]) expect(await settleOk(c.evidenceChainId, hash), String(anyFirst)).toMatchObject({ result: 'MATCH' });
      const claims = await t.database.db.selectFrom('evidence_settlement_claims').select('chain_id').where('tx_hash', '=', hash.toLowerCase()).execute();
      expect(claims.map((c) => c.chain_id).sort()).toEqual([any.evidenceChainId, fromOne.evidenceChainId].sort());
      // Both transfers are taken now.
      expect(await settleOk((await chainFor('2.5')).evidenceChainId, hash)).toMatchObject({ result: 'MISMATCH' });
      const jwks = await serviceJwks(t);
      for (const c of [any, fromOne]) expect(verifyChain(json(await readChain(t, c.evidenceChainId, p.agentKey)), jwks).ok).toBe(true);
    }
  });

  it('MATCH for the intended transfer; the same txHash again is replayed; another txHash is 409', async () => {
    const c = await chainFor('1.5', 1);
    const hash = await transfer(1, 2, 1_500_000n);
    const first = await settleOk(c.evidenceChainId, hash.toUpperCase().replace('0X', '0x'));
    expect(first).toEqual({
      evidenceChainId: c.evidenceChainId,
      settlementEvidenceId: expect.stringMatching(EVIDENCE_ID_RE),
      txHash: hash.toLowerCase(),
      result: 'MATCH',
      reason: 'USDC transfer of the expected amount to the expected recipient from the expected sender',
      mismatches: [],
      replayed: false,
      confirmations: 1,
      requiredConfirmations: 1,
      checkedAt: t.clock.now().toISOString(),
    });
    expect(await settleOk(c.evidenceChainId, hash)).toEqual({ ...first, replayed: true });
    const other = await transfer(1, 2, 1_500_000n);
    const problem = expectProblem(await settle(t, c.evidenceChainId, p.agentKey, { txHash: other }), 409, 'evidence_conflict');
    expect(problem.detail).toMatch(/already reconciled as MATCH/);
    expect(await settlementEvents(c.evidenceChainId)).toHaveLength(1);

    const summary = json(await readSummary(t, c.evidenceChainId, p.agentKey));
    expect(summary).toMatchObject({ reconciliation: 'MATCH', settlement: { txHash: hash.toLowerCase(), result: 'MATCH', confirmations: 1, requiredConfirmations: 1 } });
    const full = json(await readChain(t, c.evidenceChainId, p.agentKey));
    expect(full.events.map((e: any) => e.eventType)).toEqual(['PRECHECK_COMPLETED', 'SETTLEMENT_RECONCILED']);
    expect(full.events[1].body.receipt).toMatchObject({ kind: 'evidence-settlement_reconciled', subjectId: c.evidenceChainId });
    expect(verifyChain(full, await serviceJwks(t))).toMatchObject({ ok: true, events: 2, receiptsVerified: 2 });
  });

  it('MISMATCH lists the intent fields that differ', async () => {
    const hash = await transfer(3, 2, 1_500_000n);
    const amount = await settleOk((await chainFor('2')).evidenceChainId, hash);
    expect(amount).toMatchObject({ result: 'MISMATCH', mismatches: [{ field: 'amount', expected: '2', observed: '1.5' }] });
    const sender = await settleOk((await chainFor('1.5', 1)).evidenceChainId, hash);
    expect(sender).toMatchObject({ result: 'MISMATCH', mismatches: [{ field: 'expectedFrom', expected: addr(1), observed: addr(3) }] });
    const c = await createChain(t, p, { recipient: addr(4), amount: '1.5' });
    expect(await settleOk(c.evidenceChainId, hash)).toMatchObject({ result: 'MISMATCH', mismatches: [{ field: 'recipient', expected: addr(4), observed: addr(2) }] });
  });

  it('FAILED for a reverted transfer, final for that transaction; the payment sent again is reconciled as MATCH, which closes the chain', async () => {
    const c = await chainFor('2');
    const reverted = await transfer(4, 2, 2_000_000_000n, 100_000n);
    const failed = await settleOk(c.evidenceChainId, reverted);
    expect(failed).toMatchObject({ result: 'FAILED', reason: 'transaction reverted', mismatches: [] });
    expect(await settleOk(c.evidenceChainId, reverted)).toMatchObject({ result: 'FAILED', replayed: true });
    expect(json(await readSummary(t, c.evidenceChainId, p.agentKey)).reconciliation).toBe('FAILED');
    // Its FAILED stays its answer after another transaction was reconciled: read from storage, not again.
    expect(await settleOk(c.evidenceChainId, randomTxHash())).toMatchObject({ result: 'UNKNOWN', replayed: false });
    expect(await settleOk(c.evidenceChainId, reverted)).toMatchObject({ result: 'FAILED', replayed: true, settlementEvidenceId: failed.settlementEvidenceId });
    const paid = await transfer(1, 2, 2_000_000n);
    expect(await settleOk(c.evidenceChainId, paid)).toMatchObject({ result: 'MATCH', replayed: false });
    expect((await settlementEvents(c.evidenceChainId)).map((e: any) => e.body.result)).toEqual(['FAILED', 'UNKNOWN', 'MATCH']);
    expect(json(await readSummary(t, c.evidenceChainId, p.agentKey)).reconciliation).toBe('MATCH');
    expectProblem(await settle(t, c.evidenceChainId, p.agentKey, { txHash: randomTxHash() }), 409, 'evidence_conflict');
    // A transaction recorded before keeps its own answer.
    expect(await settleOk(c.evidenceChainId, reverted)).toMatchObject({ result: 'FAILED', replayed: true, settlementEvidenceId: failed.settlementEvidenceId });
  });

  it('UNKNOWN is not final: the same hash again records nothing new, another hash may follow', async () => {
    const c = await chainFor('1.5', 1);
    const unknown = randomTxHash();
    const first = await settleOk(c.evidenceChainId, unknown);
    expect(first).toMatchObject({ result: 'UNKNOWN', reason: 'transaction not found on Base', confirmations: 0, replayed: false });
    const again = await settleOk(c.evidenceChainId, unknown);
    expect(again).toMatchObject({ result: 'UNKNOWN', replayed: true, settlementEvidenceId: first.settlementEvidenceId });
    const hash = await transfer(1, 2, 1_500_000n);
    expect(await settleOk(c.evidenceChainId, hash)).toMatchObject({ result: 'MATCH', replayed: false });
    expect((await settlementEvents(c.evidenceChainId)).map((e: any) => e.body.result)).toEqual(['UNKNOWN', 'MATCH']);
    expect(json(await readSummary(t, c.evidenceChainId, p.agentKey)).reconciliation).toBe('MATCH');
  });

  it('PENDING below the configured depth, re-reconciled to MATCH once deep enough', async () => {
    const deep = await createTestApp({ database: t.database, clock: t.clock, config: { rpcUrls: [devnet.rpcUrl], minConfirmations: 3 } });
    try {
      const c = await chainFor('1.5');
      const hash = await transfer(1, 2, 1_500_000n);
      expect(await settleOk(c.evidenceChainId, hash, deep)).toMatchObject({ result: 'PENDING', reason: '1 of 3 required confirmations', confirmations: 1, requiredConfirmations: 3 });
      await createTestClient({ mode: 'anvil', chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) }).mine({ blocks: 2 });
      expect(await settleOk(c.evidenceChainId, hash, deep)).toMatchObject({ result: 'MATCH', confirmations: 3, requiredConfirmations: 3, replayed: false });
      expect((await settlementEvents(c.evidenceChainId)).map((e: any) => e.body.result)).toEqual(['PENDING', 'MATCH']);
    } finally {
      await deep.app.close();
    }
  });

  it('records UNKNOWN (not an error) when Base cannot be read, without leaking the RPC URL', async () => {
    const dead = `http://127.0.0.1:${await freePort()}/v2/sk-secret-rpc-key`;
    const blind = await createTestApp({ database: t.database, clock: t.clock, config: { rpcUrls: [dead], rpcTimeoutMs: 2000 } });
    try {
      const c = await chainFor('1.5');
      const res = await settle(blind, c.evidenceChainId, p.agentKey, { txHash: randomTxHash() });
      expect(res.statusCode).toBe(200);
      expect(json(res)).toMatchObject({ result: 'UNKNOWN', reason: 'the Base network could not be read; nothing was verified' });
      expect(res.body).not.toMatch(/secret|127\.0\.0\.1/);
    } finally {
      await blind.app.close();
    }
  });
});

describe('concurrent settlement submissions', () => {
  const sockets: Socket[] = [];
  it('20 different hashes at once: exactly one is recorded, the other 19 are 409', async () => {
    // An RPC endpoint that accepts connections and never answers keeps all 20 readings in flight
    // together, so every submission is concurrent with the winner (UNKNOWN is not final: a
    // submission that had already seen the winner's UNKNOWN could legitimately replace it).
    const silent = createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    const slow = await createTestApp({ database: t.database, clock: t.clock, config: { rpcUrls: [url], rpcTimeoutMs: 1000 } });
    const c = await chainFor('1.5');
    const responses = await Promise.all(Array.from({ length: 20 }, () => settle(slow, c.evidenceChainId, p.agentKey, { txHash: randomTxHash() })));
    await slow.app.close();
    silent.close();
    for (const socket of sockets.splice(0)) socket.destroy();
    const statuses = responses.map((r) => r.statusCode);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(19);
    for (const r of responses.filter((x) => x.statusCode === 409)) expectProblem(r, 409, 'evidence_conflict');
    const events = await settlementEvents(c.evidenceChainId);
    expect(events).toHaveLength(1);
    expect(events[0].evidenceId).toBe(json(responses.find((r) => r.statusCode === 200)!).settlementEvidenceId);
  });

  it('20 identical submissions at once: one recorded, every answer the same evidence', async () => {
    const c = await chainFor('1.5');
    const hash = await transfer(5, 2, 1_500_000n);
    const responses = await Promise.all(Array.from({ length: 20 }, () => settle(t, c.evidenceChainId, p.agentKey, { txHash: hash })));
    expect(responses.every((r) => r.statusCode === 200)).toBe(true);
    const bodies = responses.map((r) => json(r));
    expect(new Set(bodies.map((b) => b.settlementEvidenceId)).size).toBe(1);
    expect(bodies.filter((b) => !b.replayed)).toHaveLength(1);
    expect(bodies.every((b) => b.result === 'MATCH')).toBe(true);
    expect(await settlementEvents(c.evidenceChainId)).toHaveLength(1);
  });

  it('chains of two policies settling one transfer at once: in each policy one MATCH, the others MISMATCH naming it', async () => {
    const other = await pilotPolicy();
    const chains = await Promise.all(
      Array.from({ length: 16 }, (_, i) => {
        const policy = i % 2 ? other : p;
        return createChain(t, policy, { recipient: addr(2), amount: '4.75' }).then((c) => ({ policy, id: c.evidenceChainId }));
      }),
    );
    const hash = await transfer(1, 2, 4_750_000n);
    const answers = await Promise.all(chains.map(async (c) => ({ ...c, res: await settle(t, c.id, c.policy.agentKey, { txHash: hash }) })));
    for (const policy of [p, other]) {
      const mine = answers.filter((a) => a.policy === policy).map((a) => ({ id: a.id, status: a.res.statusCode, body: json(a.res) }));
      expect(mine.map((a) => a.status)).toEqual(Array(8).fill(200));
      const winners = mine.filter((a) => a.body.result === 'MATCH');
      expect(winners).toHaveLength(1);
      for (const loser of mine.filter((a) => a !== winners[0])) {
        expect(loser.body).toMatchObject({ result: 'MISMATCH', reason: expect.stringContaining(winners[0]!.id) });
      }
    }
  });

  it('different real transfers at once: one final result wins, the rest are 409', async () => {
    const c = await chainFor('1.5');
    const hashes = [await transfer(1, 2, 1_500_000n), await transfer(3, 2, 1_500_000n), await transfer(5, 2, 1_000_000n)];
    const responses = await Promise.all(hashes.flatMap((h) => [h, h, h]).map((txHash) => settle(t, c.evidenceChainId, p.agentKey, { txHash })));
    const winners = new Set(responses.filter((r) => r.statusCode === 200).map((r) => json(r).txHash));
    expect(winners.size).toBe(1);
    expect(responses.every((r) => r.statusCode === 200 || r.statusCode === 409)).toBe(true);
    expect(await settlementEvents(c.evidenceChainId)).toHaveLength(1);
  });
});
