// Reference client: buy one paywarden report with the official x402 client, and never pay twice.
//
//   npx tsx examples/paid-report.ts
//
// Environment (defaults suit `npm run devnet`):
//   DEVNET_JSON  the `devnet ready {...}` line (or just its JSON); supplies the three below
//   SERVICE_URL  default http://127.0.0.1:8402
//   RPC_URL      optional; when set, the payer's USDC balance is shown before and after
//   PRIVATE_KEY  default anvil's public test account 1 (loopback services only)
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from '@x402/fetch';
import { toClientEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { createPublicClient, formatUnits, http, parseAbi, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';

const USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'; // canonical USDC on Base (the devnet uses the same address)
const ANVIL_ACCOUNT_1_KEY = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d'; // public; test-only
const REPORT_PATH = '/api/quick-check';
const INPUT = {}; // the quick check takes no input; other reports take their JSON body here
const GIVE_UP_AFTER_MS = 5 * 60_000;

// --- configuration ---------------------------------------------------------------------------
interface DevnetReady { service: string; rpc: string; accounts: { index: number; privateKey: Hex }[] }
const devnetLine = process.env.DEVNET_JSON?.replace(/^\s*devnet ready\s*/, '');
const devnet = devnetLine ? (JSON.parse(devnetLine) as DevnetReady) : undefined;
const SERVICE_URL = (process.env.SERVICE_URL ?? devnet?.service ?? 'http://127.0.0.1:8402').replace(/\/+$/, '');
const RPC_URL = process.env.RPC_URL ?? devnet?.rpc;
const PRIVATE_KEY = (process.env.PRIVATE_KEY ?? devnet?.accounts.find((a) => a.index === 1)?.privateKey) as Hex | undefined;

// The fallback key is anvil's, known to everyone: refuse it anywhere but a local devnet, so a
// forgotten PRIVATE_KEY can never sign a real payment with a public key.
if (!PRIVATE_KEY && !/^https?:\/\/(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(`${SERVICE_URL}/`)) {
  fail(`set PRIVATE_KEY: the built-in test key is only used against a local devnet, not ${SERVICE_URL}`);
}
const account = privateKeyToAccount(PRIVATE_KEY ?? ANVIL_ACCOUNT_1_KEY);
const chain = RPC_URL ? createPublicClient({ chain: base, transport: http(RPC_URL) }) : undefined;

// A payment-safety client caps what it will sign: the x402 spend control refuses any challenge
// above this, whatever the server asks.
const client = new x402Client()
  .register('eip155:8453', new ExactEvmScheme(toClientEvmSigner(account, chain)))
  .setSpendControls({ maxAmountPerPayment: '$0.01' });
const payingFetch = wrapFetchWithPayment(fetch, client);

// --- the flow --------------------------------------------------------------------------------
console.log(`service ${SERVICE_URL}\npayer   ${account.address}`);
const before = await usdcBalance();

// (a) An order first: if anything goes wrong after we sign (timeout, crash, lost answer), id and
// key restore the report we paid for. Keep them until the report is in hand.
const created = await postJson('/api/orders', { path: REPORT_PATH, input: INPUT });
if (created.status !== 201) await failWith('creating the recovery order', created);
const order = (await created.json()) as { id: string; key: string; expiresAt: string };
// Printed so that a demo can be resumed by hand. A real client stores the key where only it can
// read it (whoever holds id and key can restore the report) and never logs it.
console.log(`\n(a) recovery order  id=${order.id}  key=${order.key}  expires ${order.expiresAt}`);

// (b) Pay. The wrapper sees the 402, signs one EIP-3009 authorization for the quoted price, and
// retries once with PAYMENT-SIGNATURE; Report-Id/Recovery-Key bind that payment to our order.
let paid: Response;
try {
  paid = await payingFetch(`${SERVICE_URL}${REPORT_PATH}`, { headers: { 'Report-Id': order.id, 'Recovery-Key': order.key } });
} catch (err) {
  // We may or may not have paid: restore, never pay again.
  fail(`payment request failed (${err instanceof Error ? err.message : String(err)}); restore with POST /api/orders/recover {"id":"${order.id}","key":"${order.key}"}`);
}
console.log(`\n(b) paid request -> ${paid.status}`);

// (c) Only 200 is a delivered report. 202 means the payment is in flight: signing again could
// charge twice, so wait for the order to be released instead.
const delivered = await reportFrom(paid);
console.log('\nreport', JSON.stringify(delivered.report, null, 2));
console.log('receipt', JSON.stringify(delivered.receipt, null, 2));

// (d) The order restores the same report (same signed receipt) at no cost, for as long as it lives.
const again = await postJson('/api/orders/recover', { id: order.id, key: order.key });
if (again.status !== 200) await failWith('restoring the report', again);
const restored = (await again.json()) as { receipt: Receipt };
console.log(`\n(d) restored without paying: receipt ${restored.receipt.receiptId} ${restored.receipt.receiptId === delivered.receipt.receiptId ? '(same as delivered)' : '(DIFFERENT!)'}`);

const after = await usdcBalance();
if (before !== undefined && after !== undefined) {
  console.log(`\nUSDC ${formatUnits(before, 6)} -> ${formatUnits(after, 6)}: paid ${formatUnits(before - after, 6)} once (price ${delivered.receipt.subject.price})`);
}

// --- helpers ---------------------------------------------------------------------------------
interface Receipt { receiptId: string; subject: { price: string; settlementTransaction: string } }

async function reportFrom(res: Response): Promise<{ report: Record<string, unknown>; receipt: Receipt }> {
  if (res.status === 200) {
    const { receipt, ...report } = (await res.json()) as Record<string, unknown> & { receipt: Receipt };
    const header = res.headers.get('payment-response');
    console.log('PAYMENT-RESPONSE', header ? JSON.stringify(decodePaymentResponseHeader(header), null, 2) : '(absent)');
    return { report, receipt };
  }
  if (res.status === 202) {
    console.log('pending:', JSON.stringify(await res.json()), '\n-> polling /api/orders/recover, not paying again');
    return recoverUntilReleased(order);
  }
  return failWith('paying for the report', res);
}

async function recoverUntilReleased(o: { id: string; key: string }) {
  const deadline = Date.now() + GIVE_UP_AFTER_MS;
  for (;;) {
    const res = await postJson('/api/orders/recover', { id: o.id, key: o.key });
    if (res.status === 200) return (await res.json()) as { report: Record<string, unknown>; receipt: Receipt };
    if (res.status !== 202) return failWith('recovering the report', res);
    const wait = retryAfterMs(res.headers.get('retry-after'));
    const body = (await res.json()) as { status?: string; reason?: string };
    // The payment we waited for can no longer settle: nothing was charged, and the order may be paid again.
    if (body.status === 'unpaid') fail(`the payment did not go through (${body.reason}); order id=${o.id} key=${o.key}`);
    if (Date.now() + wait > deadline) fail(`still pending (${body.reason}); try the recovery later with id=${o.id} key=${o.key}`);
    console.log(`  202 (${body.reason}); retrying in ${wait / 1000}s`);
    await new Promise((r) => setTimeout(r, wait));
  }
}

function retryAfterMs(value: string | null): number {
  const seconds = Number(value);
  const ms = Number.isFinite(seconds) && value !== null ? seconds * 1000 : value ? Date.parse(value) - Date.now() : NaN;
  return Math.min(Math.max(Number.isFinite(ms) ? ms : 5000, 1000), 60_000);
}

function postJson(path: string, body: unknown): Promise<Response> {
  return fetch(`${SERVICE_URL}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

async function usdcBalance(): Promise<bigint | undefined> {
  if (!chain) return undefined;
  const abi = parseAbi(['function balanceOf(address) view returns (uint256)']);
  return chain.readContract({ address: USDC, abi, functionName: 'balanceOf', args: [account.address] });
}

/** Errors are RFC 9457 problem bodies: show them as they are, with the status. */
async function failWith(what: string, res: Response): Promise<never> {
  const text = await res.text();
  let shown = text;
  try {
    shown = JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    /* not JSON: print as is */
  }
  return fail(`${what}: HTTP ${res.status}\n${shown}`);
}

function fail(message: string): never {
  console.error(`\nerror: ${message}`);
  process.exit(1);
}
