// Issue 7 "Done when", end to end on the devnet: anvil as Base with Circle's USDC, the whole
// service over HTTP (inject), the operator CLI for direct checks, and the audit CLI at the end.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWalletClient, encodeFunctionData, http, type Address, type Hash, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { run } from '../../src/cli.js';
import { USDC_ADDRESS, baseDevnetChain, fiatTokenAbi, startDevnet, type Devnet } from '../../src/devnet/index.js';
import { createChainClient, type ChainClient } from '../../src/platform/chain.js';
import { ManualClock } from '../../src/platform/clock.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { HUGE_DECIMALS, placeHugeDecimalsToken } from '../helpers/odd-token.js';
import { testDialect } from '../helpers/db.js';
import { createPolicy, type Created } from '../helpers/policies.js';
import { attachPreflight, createChain, randomTxHash, readChain, readSummary, settle } from '../api/evidence-helpers.js';

let devnet: Devnet;
let chain: ChainClient;
let t: TestApp;
let p: Created;
let dir: string;
const addr = (i: number): Address => devnet.accounts[i]!.address;
const cliOut = { lines: [] as string[], errors: [] as string[] };
const cli = (...argv: string[]) =>
  run(argv, { log: (s) => cliOut.lines.push(s), error: (s) => cliOut.errors.push(s) }, { DATABASE_URL: t.database.url });

/** Signs and sends an unsigned transaction with a devnet wallet (the agent's wallet, never the service). */
async function send(from: number, tx: { to: Address; data: Hex }, gas?: bigint): Promise<Hash> {
  const wallet = createWalletClient({ account: privateKeyToAccount(devnet.accounts[from]!.privateKey), chain: baseDevnetChain(devnet.rpcUrl), transport: http(devnet.rpcUrl) });
  const hash = await wallet.sendTransaction({ to: tx.to, data: tx.data, ...(gas ? { gas } : {}) });
  await chain.waitForTransactionReceipt({ hash });
  return hash;
}
const usdcTransfer = (to: number, micro: bigint) => ({ to: USDC_ADDRESS as Address, data: encodeFunctionData({ abi: fiatTokenAbi, functionName: 'transfer', args: [addr(to), micro] }) });

beforeAll(async () => {
  devnet = await startDevnet();
  chain = createChainClient({ rpcUrls: [devnet.rpcUrl], rpcTimeoutMs: 5000 });
  // The operator CLI runs on the wall clock, and refuses a policy whose pilot access has ended on
  // it: the service's clock starts at the real time, as in production.
  t = await createTestApp({ clock: new ManualClock(new Date()), config: { rpcUrls: [devnet.rpcUrl], minConfirmations: 1 } });
  dir = mkdtempSync(join(tmpdir(), 'paywarden-evidence-e2e-'));
}, 120_000);

afterAll(async () => {
  await t?.close();
  await devnet?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(testDialect !== 'sqlite')('evidence chains end to end on the devnet', () => {
  let matched: string;

  it('creates a policy and enables direct checks with the operator CLI', async () => {
    p = await createPolicy(t, { allowedRecipients: [addr(2)], blockUnknownRecipients: true, requireHumanAbove: '100', maxPerTransaction: '100', dailyBudget: '500' });
    expect(await cli('policy', 'direct-checks', p.policyId, 'on')).toBe(0);
    const policy = json(await t.app.inject({ method: 'GET', url: `/api/spendpolicy/policies/${p.policyId}`, headers: { authorization: `Bearer ${p.adminKey}` } }));
    expect(policy.directChecks).toBe(true);
  });

  it('APPROVE, preflight of the USDC transfer, the transfer sent, reconciled -> MATCH', async () => {
    const created = await createChain(t, p, { recipient: addr(2), amount: '1.5', expectedFrom: addr(1) });
    expect(created).toMatchObject({ decision: 'APPROVE', reasons: [], executionAuthorized: false, replayed: false });
    matched = created.evidenceChainId;

    const unsigned = usdcTransfer(2, 1_500_000n);
    const pre = await attachPreflight(t, matched, p.agentKey, { chain: 'base', ...unsigned, from: addr(1) });
    expect(pre.statusCode, pre.body).toBe(200);
    expect(json(pre)).toMatchObject({ verdict: { decision: 'ALLOW' }, intentCheck: { match: true }, replayed: false });

    const hash = await send(1, unsigned);
    const res = await settle(t, matched, p.agentKey, { txHash: hash });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toMatchObject({ txHash: hash, result: 'MATCH', mismatches: [], replayed: false, confirmations: 1, requiredConfirmations: 1 });

    const summary = json(await readSummary(t, matched, p.agentKey));
    expect(summary).toMatchObject({ reconciliation: 'MATCH', preAuthorization: { decision: 'APPROVE' }, transactionPreflight: { verdict: { decision: 'ALLOW' } }, settlement: { result: 'MATCH' } });
    // When the transfer was mined and how final its block is are recorded with the result.
    expect(Date.parse(summary.settlement.minedAt)).toBeGreaterThan(0);
    expect(summary.settlement).toHaveProperty('finality');
    const events = json(await readChain(t, matched, p.agentKey)).events;
    expect(events.map((e: any) => [e.sequence, e.eventType])).toEqual([
      [1, 'PRECHECK_COMPLETED'],
      [2, 'TRANSACTION_PREFLIGHT_COMPLETED'],
      [3, 'SETTLEMENT_RECONCILED'],
    ]);
  });

  it('another chain reconciled against a transfer of a different amount -> MISMATCH naming the amount', async () => {
    const { evidenceChainId } = await createChain(t, p, { recipient: addr(2), amount: '2' });
    const hash = await send(3, usdcTransfer(2, 1_500_000n));
    const res = json(await settle(t, evidenceChainId, p.agentKey, { txHash: hash }));
    expect(res).toMatchObject({ result: 'MISMATCH', mismatches: [{ field: 'amount', expected: '2', observed: '1.5' }] });
  });

  it('a reverted transfer -> FAILED', async () => {
    const { evidenceChainId } = await createChain(t, p, { recipient: addr(2), amount: '50' });
    // More than account 4 holds (1,000 USDC); a manual gas limit makes the node mine the revert.
    const hash = await send(4, usdcTransfer(2, 2_000_000_000n), 100_000n);
    expect((await chain.getTransactionReceipt({ hash })).status).toBe('reverted');
    expect(json(await settle(t, evidenceChainId, p.agentKey, { txHash: hash }))).toMatchObject({ result: 'FAILED', reason: 'transaction reverted' });
  });

  it('an unknown hash -> UNKNOWN, and the summary says UNKNOWN is not verification', async () => {
    const { evidenceChainId } = await createChain(t, p, { recipient: addr(2), amount: '3' });
    expect(json(await settle(t, evidenceChainId, p.agentKey, { txHash: randomTxHash() }))).toMatchObject({ result: 'UNKNOWN', confirmations: 0 });
    const summary = json(await readSummary(t, evidenceChainId, p.agentKey));
    expect(summary.reconciliation).toBe('UNKNOWN');
    expect(summary.limitations.join()).toMatch(/UNKNOWN is not verification/);
  });

  it('the matched chain verifies with the CLI against the service JWKS; an edited copy does not', async () => {
    const file = join(dir, 'chain.json');
    const body = json(await readChain(t, matched, p.agentKey));
    writeFileSync(file, JSON.stringify(body, null, 2));
    const jwksUrl = `${await t.app.listen({ host: '127.0.0.1', port: 0 })}/.well-known/jwks.json`;
    cliOut.lines.length = 0;
    expect(await cli('evidence', 'verify', file, '--jwks', jwksUrl)).toBe(0);
    expect(JSON.parse(cliOut.lines.join('\n'))).toMatchObject({ ok: true, events: 3, receiptsVerified: 3, problems: [] });

    body.events[2].body.result = 'MISMATCH';
    writeFileSync(file, JSON.stringify(body));
    expect(await cli('evidence', 'verify', file, '--jwks', jwksUrl)).toBe(1);
  });

  it('a preflight of a token whose decimals() answers 2^32 is recorded in base units, not a 500', async () => {
    const token = '0x00000000000000000000000000000000dec1dec3';
    await placeHugeDecimalsToken(devnet.rpcUrl, token);
    const { evidenceChainId } = await createChain(t, p, { recipient: addr(2), amount: '1' });
    const data = encodeFunctionData({ abi: fiatTokenAbi, functionName: 'transfer', args: [addr(2), 5n] });
    const pre = await attachPreflight(t, evidenceChainId, p.agentKey, { chain: 'base', to: token, data, from: addr(1) });
    expect(pre.statusCode, pre.body).toBe(200);
    expect(json(pre).preflight.simulation.assetChanges).toEqual([expect.objectContaining({ decimals: null, rawAmount: HUGE_DECIMALS.toString(), amount: HUGE_DECIMALS.toString() })]);
  });
});
