// A service whose RPC URL points at a fork or a testnet by mistake: the paid token-risk report and
// the paid preflight refuse it as a 502 (no ALLOW about a chain that is not Base), and the
// pipeline (verify -> produce -> store -> settle) settles nothing for a report that was never
// produced. The RPC is a real anvil forking the devnet but answering chain id 84532, so without
// the chain check it would answer exactly what Base (the devnet) answers: ALLOW, and a charge.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeFunctionData } from 'viem';
import { USDC_ADDRESS, fiatTokenAbi, startDevnet, type ChainHandle, type Devnet } from '../../src/devnet/index.js';
import { expectProblem } from '../helpers/problems.js';
import { asInjected, paidRowOf, signPayment, startPaidStack, type PaidStack } from '../helpers/paid.js';
import { NOT_BASE_CHAIN_ID, startWrongChainFork } from '../helpers/wrong-chain.js';

const PAYER = 6;
let devnet: Devnet;
let fork: ChainHandle;
let wrong: PaidStack;
let onBase: PaidStack;

beforeAll(async () => {
  devnet = await startDevnet({ zoo: true });
  fork = await startWrongChainFork(devnet.rpcUrl);
  wrong = await startPaidStack({ devnet, config: { rpcUrls: [fork.rpcUrl], rpcTimeoutMs: 5000 } });
  // The same service (same database and payee) reading Base itself.
  onBase = await startPaidStack({ devnet, database: wrong.t.database });
}, 120_000);
afterAll(async () => {
  await onBase?.close();
  await wrong?.close();
  await fork?.stop();
  await devnet?.stop();
});

const reports = {
  'token risk of a token Base would ALLOW': () => ({ path: '/api/token-risk', body: { chain: 'base', address: devnet.zoo!.tokens.honest } }),
  'preflight of a USDC payment Base would ALLOW': () => ({
    path: '/api/transaction-preflight',
    body: {
      chain: 'base',
      to: USDC_ADDRESS,
      from: devnet.accounts[1]!.address,
      data: encodeFunctionData({ abi: fiatTokenAbi, functionName: 'transfer', args: [devnet.accounts[2]!.address, 1_500_000n] }),
    },
  }),
};

describe('paid reports from an RPC that does not serve Base', () => {
  it.each(Object.keys(reports) as Array<keyof typeof reports>)('%s: 502, nothing stored, settled or charged', async (name) => {
    const { path, body } = reports[name]();
    const init = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
    const sig = await signPayment(wrong, PAYER, `${wrong.url}${path}`, init);
    const payer = devnet.accounts[PAYER]!.address;
    const [payee0, payer0] = [await wrong.balanceOf(wrong.payTo), await wrong.balanceOf(payer)];
    const { verify: verify0, settle: settle0 } = { ...devnet.facilitator.calls };

    const res = await fetch(`${wrong.url}${path}`, { ...init, headers: { ...init.headers, 'payment-signature': sig } });
    const problem = expectProblem(await asInjected(res), 502, 'upstream_unavailable');
    expect(JSON.stringify(problem)).not.toMatch(new RegExp(`127\\.0\\.0\\.1|${NOT_BASE_CHAIN_ID}`));
    expect(res.headers.get('payment-response')).toBeNull();
    // The payment was verified, then the report failed: nothing stored, so nothing settled.
    expect(devnet.facilitator.calls.verify).toBe(verify0 + 1);
    expect(await paidRowOf(wrong, sig)).toBeUndefined();
    expect(devnet.facilitator.calls.settle).toBe(settle0);
    expect(await wrong.balanceOf(wrong.payTo)).toBe(payee0);
    expect(await wrong.balanceOf(payer)).toBe(payer0);

    // Nothing was used up: the same payment buys the report from the service that reads Base.
    const ok = await fetch(`${onBase.url}${path}`, { ...init, headers: { ...init.headers, 'payment-signature': sig } });
    expect(ok.status, await ok.clone().text()).toBe(200);
    expect((await ok.json()).verdict.decision).toBe('ALLOW');
    expect(devnet.facilitator.calls.settle).toBe(settle0 + 1);
    expect(await wrong.balanceOf(payer)).toBeLessThan(payer0);
  });
});

describe('the quick check against an RPC that does not serve Base', () => {
  it('reports the chain id it finds: a delivered FAIL naming 84532, never a 502', async () => {
    const url = `${wrong.url}/api/quick-check`;
    const sig = await signPayment(wrong, PAYER, url);
    const res = await fetch(url, { headers: { 'payment-signature': sig } });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'FAIL', checks: { chainId: { observed: NOT_BASE_CHAIN_ID, match: false } } });
  });
});
