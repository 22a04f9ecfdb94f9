// Preflight attachment with the real transaction preflight against anvil as Base; on SQLite and
// PostgreSQL, since which of two different preflights is attached is the database's business.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeFunctionData, type Address } from 'viem';
import { USDC_ADDRESS, fiatTokenAbi, freePort, type Devnet } from '../../src/devnet/index.js';
import { verifyChain } from '../../src/features/evidence/verify.js';
import { preflightInputDigest } from '../../src/features/preflight/preflight.js';
import { createTestApp, json, type TestApp } from '../helpers/app.js';
import { expectInvalid, expectProblem } from '../helpers/problems.js';
import type { Created } from '../helpers/policies.js';
import { NOT_BASE_CHAIN_ID, startWrongChainFork } from '../helpers/wrong-chain.js';
import { EVIDENCE_ID_RE, attachPreflight, createChain, readChain, readSummary, serviceJwks, startEvidenceDevnet } from './evidence-helpers.js';

let devnet: Devnet;
let t: TestApp;
let p: Created;
const addr = (i: number): Address => devnet.accounts[i]!.address;

/** The unsigned USDC transfer of `micro` to account `to`, sent from account 1. */
const usdcTransfer = (to: number, micro: bigint) => ({
  chain: 'base',
  to: USDC_ADDRESS,
  from: addr(1),
  data: encodeFunctionData({ abi: fiatTokenAbi, functionName: 'transfer', args: [addr(to), micro] }),
});
const newChain = () => createChain(t, p, { recipient: addr(2), amount: '1.5', expectedFrom: addr(1) });
const preflightEvents = async (id: string) => json(await readChain(t, id, p.agentKey)).events.filter((e: any) => e.eventType === 'TRANSACTION_PREFLIGHT_COMPLETED');

beforeAll(async () => {
  ({ devnet, t, p } = await startEvidenceDevnet());
}, 120_000);

afterAll(async () => {
  await t?.close();
  await devnet?.stop();
});

describe('preflight attachment', () => {
  it('runs the preflight, records its input digest and appends TRANSACTION_PREFLIGHT_COMPLETED', async () => {
    const c = await newChain();
    const input = usdcTransfer(2, 1_500_000n);
    const res = await attachPreflight(t, c.evidenceChainId, p.agentKey, input);
    expect(res.statusCode, res.body).toBe(200);
    const body = json(res);
    expect(body).toMatchObject({
      evidenceChainId: c.evidenceChainId,
      preflightEvidenceId: expect.stringMatching(EVIDENCE_ID_RE),
      inputDigest: preflightInputDigest(input as never),
      verdict: { decision: 'ALLOW' },
      intentCheck: { kind: 'usdc-transfer', match: true, mismatches: [] },
      replayed: false,
      executionAuthorized: false,
    });
    expect(body.preflight).toMatchObject({ inputDigest: body.inputDigest, verdict: body.verdict, destination: { knownAs: 'USDC' } });
    expect(body.preflight.simulation.assetChanges).toEqual([expect.objectContaining({ from: addr(1), to: addr(2), amount: '1.5' })]);

    const events = await preflightEvents(c.evidenceChainId);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ evidenceId: body.preflightEvidenceId, sequence: 2, body: { inputDigest: body.inputDigest } });
    const summary = json(await readSummary(t, c.evidenceChainId, p.agentKey));
    expect(summary.transactionPreflight).toMatchObject({ evidenceId: body.preflightEvidenceId, inputDigest: body.inputDigest, verdict: { decision: 'ALLOW' }, intentCheck: { match: true } });
    expect(verifyChain(json(await readChain(t, c.evidenceChainId, p.agentKey)), await serviceJwks(t))).toMatchObject({ ok: true, events: 2, receiptsVerified: 2 });
  });

  it('the same preflight again (in any spelling) answers the recorded one; a different one is 409', async () => {
    const c = await newChain();
    const input = usdcTransfer(2, 1_500_000n);
    const first = json(await attachPreflight(t, c.evidenceChainId, p.agentKey, input));
    const respelled = { ...input, to: input.to.toLowerCase(), from: input.from.toUpperCase().replace('0X', '0x'), valueWei: '0' };
    const again = await attachPreflight(t, c.evidenceChainId, p.agentKey, respelled);
    expect(again.statusCode).toBe(200);
    expect(json(again)).toEqual({ ...first, replayed: true });
    const problem = expectProblem(await attachPreflight(t, c.evidenceChainId, p.agentKey, usdcTransfer(2, 1_000_000n)), 409, 'preflight_conflict');
    expect(problem.title).toBe('Different preflight already attached');
    // The recorded preflight's digest is public evidence: shown, not redacted like a key.
    expect(problem.detail).toContain(first.inputDigest);
    expect(await preflightEvents(c.evidenceChainId)).toHaveLength(1);
  });

  it('says when the unsigned transaction does not pay the intent', async () => {
    const c = await newChain();
    const body = json(await attachPreflight(t, c.evidenceChainId, p.agentKey, usdcTransfer(3, 2_000_000n)));
    expect(body.intentCheck).toEqual({
      kind: 'usdc-transfer',
      match: false,
      mismatches: [
        { field: 'recipient', expected: addr(2), observed: addr(3) },
        { field: 'amount', expected: '1.5', observed: '2' },
      ],
    });
  });

  it('concurrent different preflights: exactly one is attached, the others are 409', async () => {
    const c = await newChain();
    const inputs = Array.from({ length: 10 }, (_, i) => usdcTransfer(2, 1_000_000n + BigInt(i)));
    const responses = await Promise.all(inputs.map((input) => attachPreflight(t, c.evidenceChainId, p.agentKey, input)));
    expect(responses.filter((r) => r.statusCode === 200)).toHaveLength(1);
    for (const r of responses.filter((x) => x.statusCode !== 200)) expectProblem(r, 409, 'preflight_conflict');
    expect(await preflightEvents(c.evidenceChainId)).toHaveLength(1);
  });

  it('valueWei above 2^256 - 1 is the paid preflight\'s 400, before anything is recorded; the slot stays free', async () => {
    const c = await newChain();
    const huge = { chain: 'base', to: addr(2), valueWei: (2n ** 256n).toString() };
    const paid = expectInvalid(await t.app.inject({ method: 'POST', url: '/api/transaction-preflight', payload: huge }), 'body/valueWei');
    const attached = expectInvalid(await attachPreflight(t, c.evidenceChainId, p.agentKey, huge), 'body/valueWei');
    expect(attached.errors).toEqual(paid.errors);
    expect(attached.detail).toBe(paid.detail);
    expectInvalid(await attachPreflight(t, c.evidenceChainId, p.agentKey, { ...huge, valueWei: '9'.repeat(78) }), 'body/valueWei');
    expect(await preflightEvents(c.evidenceChainId)).toHaveLength(0);
    // The corrected input is still accepted: nothing took the chain's one preflight.
    const fixed = await attachPreflight(t, c.evidenceChainId, p.agentKey, usdcTransfer(2, 1_500_000n));
    expect(fixed.statusCode, fixed.body).toBe(200);
  });

  it('503 without recording anything when Base cannot be read; the URL never leaks', async () => {
    const dead = `http://127.0.0.1:${await freePort()}/v2/sk-secret-rpc-key`;
    const blind = await createTestApp({ database: t.database, clock: t.clock, config: { rpcUrls: [dead], rpcTimeoutMs: 2000 } });
    try {
      const c = await newChain();
      const res = await attachPreflight(blind, c.evidenceChainId, p.agentKey, usdcTransfer(2, 1_500_000n));
      const problem = expectProblem(res, 503, 'provider_unavailable');
      expect(problem.title).toBe('Provider unavailable');
      expect(res.body).not.toMatch(/secret|127\.0\.0\.1/);
      expect(await preflightEvents(c.evidenceChainId)).toHaveLength(0);
    } finally {
      await blind.app.close();
    }
  });

  it('503 without recording anything when the RPC does not serve Base (a fork answering another chain id)', async () => {
    const fork = await startWrongChainFork(devnet.rpcUrl);
    const elsewhere = await createTestApp({ database: t.database, clock: t.clock, config: { rpcUrls: [fork.rpcUrl], rpcTimeoutMs: 5000 } });
    try {
      const c = await newChain();
      // On Base this very preflight is an ALLOW (the first test); the fork's state is the same.
      const res = await attachPreflight(elsewhere, c.evidenceChainId, p.agentKey, usdcTransfer(2, 1_500_000n));
      expectProblem(res, 503, 'provider_unavailable');
      expect(res.body).not.toMatch(new RegExp(`127\\.0\\.0\\.1|${NOT_BASE_CHAIN_ID}`));
      expect(await preflightEvents(c.evidenceChainId)).toHaveLength(0);
    } finally {
      await elsewhere.app.close();
      await fork.stop();
    }
  });
});
