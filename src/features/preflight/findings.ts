import { size, type Address, type Hex } from 'viem';
import type { AssetMovement } from './assets.js';
import { counterpartyOf, type CalldataDecoding, type TokenAction } from './calldata.js';
import type { AccountCode } from './context.js';
import { SUPPLY_CEILING, USDC, UNLIMITED_THRESHOLD, isBurnAddress, isPrecompile, same, type TokenMeta } from './known.js';
import type { DecodedRevert } from './revert.js';
import type { TraceSummary } from './trace.js';

/**
 * The rules of the preflight: a pure function of the gathered evidence and a clock, no I/O.
 * Codes are stable snake_case; each finding carries the evidence it rests on. Static rules
 * (calldata, account kinds) apply even when the simulation could not run.
 */

export type Severity = 'info' | 'warn' | 'block';
export type Decision = 'ALLOW' | 'WARN' | 'BLOCK' | 'INCOMPLETE';
export type DestinationKind = 'eoa' | 'contract' | 'delegated-eoa' | 'precompile';

export interface Finding {
  code: string;
  severity: Severity;
  message: string;
  evidence: Record<string, unknown>;
}

export interface PreflightEvidence {
  /** The transaction as simulated; `from` is the fresh sender when the caller gave none. */
  tx: { from: Address; to: Address; value: bigint; data: Hex };
  senderProvided: boolean;
  decoded: CalldataDecoding;
  /**
   * Allowances on the sender's assets that the simulation's logs show granted and the calldata
   * decoding does not (see approvalsOf): judged like decoded ones.
   */
  logApprovals: TokenAction[];
  /** Account kinds by lower-case address (destination, spenders, recipients); missing = unknown. */
  accounts: Map<string, AccountCode>;
  tokens: Map<string, TokenMeta>;
  simulation: {
    ran: boolean;
    success: boolean | null;
    revert: DecodedRevert | null;
    valueRejected: boolean | null;
    unavailable: string | null;
  };
  trace: TraceSummary | null;
  movements: AssetMovement[];
  /** Addresses `from` recently paid USDC; null when not checked (no sender, or the read failed). */
  counterparties: Address[] | null;
  /** The read of counterparties was needed but failed. */
  counterpartiesFailed: boolean;
}

export function kindOf(address: string, accounts: Map<string, AccountCode>): DestinationKind | null {
  if (isPrecompile(address)) return 'precompile';
  const a = accounts.get(address.toLowerCase());
  if (!a) return null;
  if (a.delegated) return 'delegated-eoa';
  return a.codeSize > 0 ? 'contract' : 'eoa';
}

/** Addresses the transaction pays or empowers: where a poisoned look-alike would do harm. */
export function recipientsOf(e: Pick<PreflightEvidence, 'tx' | 'decoded' | 'movements' | 'logApprovals'>): Address[] {
  const out = new Map<string, Address>();
  const put = (a: Address) => out.set(a.toLowerCase(), a);
  for (const x of [...e.decoded.actions, ...e.logApprovals]) put(counterpartyOf(x));
  if (e.tx.value > 0n || size(e.tx.data) === 0) put(e.tx.to);
  for (const m of e.movements) if (same(m.from, e.tx.from)) put(m.to);
  return [...out.values()];
}

/** Same first 4 and last 4 hex characters, different middle: what address-poisoning forges. */
export function looksAlike(a: string, b: string): boolean {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  return x !== y && x.slice(2, 6) === y.slice(2, 6) && x.slice(-4) === y.slice(-4);
}

const SEVERITY_ORDER: Record<Severity, number> = { block: 0, warn: 1, info: 2 };

export function findingsOf(e: PreflightEvidence, now: Date): Finding[] {
  const out: Finding[] = [];
  const add = (code: string, severity: Severity, message: string, evidence: Record<string, unknown> = {}) => out.push({ code, severity, message, evidence });
  const kind = (a: string) => kindOf(a, e.accounts);
  const destKind = kind(e.tx.to);
  const sim = e.simulation;
  const value = e.tx.value;
  const hasData = size(e.tx.data) > 0;

  if (!sim.ran) add('simulation_unavailable', 'info', `The transaction could not be simulated: ${sim.unavailable ?? 'unknown reason'}.`);
  if (sim.revert?.kind === 'insufficient-funds') {
    add('insufficient_native_balance', 'block', 'The sender does not hold enough ETH for the value and gas of this transaction.', { sender: e.tx.from, valueWei: e.tx.value.toString() });
  } else if (sim.ran && sim.success === false) {
    // With a fresh sender a revert may only mean that sender lacks balances or allowances.
    const r = sim.revert;
    add('simulation_reverted', e.senderProvided ? 'block' : 'warn', `The transaction reverts: ${r?.reason ?? 'no reason given'}.`, {
      revertReason: r?.reason ?? null,
      errorKind: r?.kind ?? null,
      selector: r?.selector ?? null,
      errorName: r?.errorName ?? null,
      errorArgs: r?.args ?? null,
      senderProvided: e.senderProvided,
    });
  }
  if (!e.senderProvided) add('fresh_sender', 'info', 'No sender was given: the simulation used a fresh address funded with ETH and USDC by state overrides.', { sender: e.tx.from });

  // The destination refuses ETH when the revert disappears without the value (measured in the
  // same simulation), or when sending ETH is all the transaction does. Without the value-less
  // comparison (fallback path), a revert at once, with no reason and no inner call, is the
  // signature of Solidity's non-payable check.
  const executes = destKind === 'contract' || destKind === 'delegated-eoa';
  const rejected =
    sim.success === false && value > 0n && executes &&
    (sim.valueRejected === true || !hasData || (sim.valueRejected === null && sim.revert?.kind === 'empty' && e.trace?.topLevelSubcalls === 0));
  if (rejected) {
    add('native_value_rejected', 'block', 'The destination rejects the ETH sent with this transaction.', { to: e.tx.to, valueWei: value.toString(), comparedWithoutValue: sim.valueRejected !== null });
  }
  if (hasData && destKind === 'eoa') {
    const fn = e.decoded.calls[0]?.function ?? null;
    add('calldata_to_eoa', 'warn', 'Calldata is sent to an address without code: nothing will execute it (a token call sent to a wallet instead of the token?).', { to: e.tx.to, function: fn, selector: e.decoded.calls[0]?.selector ?? null });
  }
  if (destKind === 'delegated-eoa') {
    const a = e.accounts.get(e.tx.to.toLowerCase());
    add('delegated_destination', 'warn', 'The destination is an EOA delegated to contract code (EIP-7702): it behaves like whatever code it delegates to, and its key can change that.', { to: e.tx.to, delegate: a?.delegate ?? null });
  }
  if (isBurnAddress(e.tx.to) && value > 0n) {
    add('transfer_to_burn_address', 'block', 'ETH is sent to a burn address and will be lost.', { to: e.tx.to, valueWei: value.toString() });
  }

  // Calldata sent to an EOA executes nothing: what it encodes will not happen.
  const inert = (path: string) => kind(e.decoded.calls.find((c) => c.path === path)?.target ?? e.tx.to) === 'eoa';
  for (const x of e.decoded.actions) if (!inert(x.path)) actionFindings(x, e, add, kind, now);
  for (const x of e.logApprovals) actionFindings(x, e, add, kind, now);
  traceFindings(e, add);
  usdcOutflow(e, add);
  poisoning(e, add);
  return out.map((f, i) => ({ f, i })).sort((a, b) => SEVERITY_ORDER[a.f.severity] - SEVERITY_ORDER[b.f.severity] || a.i - b.i).map((x) => x.f);
}

/**
 * The approvals the logs show that no decoded action already stands for (same token, spender or
 * operator, and amount): a plain approve() emits its own Approval log, judged once.
 */
export function undecodedApprovals(logApprovals: TokenAction[], decoded: CalldataDecoding): TokenAction[] {
  const key = (x: TokenAction) => `${x.kind}|${x.token}|${counterpartyOf(x)}|${x.kind === 'approve-all' ? x.approved : x.amount}`.toLowerCase();
  const seen = new Set(decoded.actions.map(key));
  return logApprovals.filter((x) => !seen.has(key(x)));
}

type Add = (code: string, severity: Severity, message: string, evidence?: Record<string, unknown>) => void;

function actionFindings(x: TokenAction, e: PreflightEvidence, add: Add, kind: (a: string) => DestinationKind | null, now: Date): void {
  const meta = e.tokens.get(x.token.toLowerCase());
  const where = { token: x.token, symbol: meta?.symbol ?? null, via: x.via, path: x.path };
  if (x.kind === 'transfer') {
    if (same(x.to, x.token)) add('transfer_to_token_contract', 'block', 'Tokens are sent to the token contract itself, where they are usually lost for good.', { ...where, to: x.to, amount: x.amount.toString() });
    if (isBurnAddress(x.to)) add('transfer_to_burn_address', 'block', 'Tokens are sent to a burn address and will be lost.', { ...where, to: x.to, amount: x.amount.toString() });
    return;
  }
  const who = counterpartyOf(x);
  const whoKind = kind(who);
  if (x.kind === 'approve-all') {
    if (!x.approved) return;
    add('approval_for_all', 'info', 'The transaction lets an operator move every token of this collection.', { ...where, operator: who });
  } else if (meta?.standard !== 'erc721') {
    if (x.amount === 0n) add('approval_revoked', 'info', 'The transaction sets an allowance to zero (a revocation).', { ...where, spender: who });
    else if (x.amount >= UNLIMITED_THRESHOLD) add('approval_unlimited', 'warn', 'The transaction grants an unlimited allowance: the spender can take every token of this kind, now and later.', { ...where, spender: who, amount: x.amount.toString() });
    else if (meta?.totalSupply != null && meta.totalSupply > 0n && x.amount > meta.totalSupply) add('approval_very_large', 'warn', 'The allowance exceeds the token\'s total supply: in effect unlimited.', { ...where, spender: who, amount: x.amount.toString(), totalSupply: meta.totalSupply.toString() });
    else if (meta?.totalSupply == null && x.token && SUPPLY_CEILING[x.token.toLowerCase()] !== undefined && x.amount > SUPPLY_CEILING[x.token.toLowerCase()]!) {
      add('approval_very_large', 'warn', 'The allowance exceeds any supply this token has had: in effect unlimited.', { ...where, spender: who, amount: x.amount.toString(), supplyCeiling: SUPPLY_CEILING[x.token.toLowerCase()]!.toString() });
    }
    if (x.deadline !== null && x.deadline < BigInt(Math.floor(now.getTime() / 1000)) && x.via.startsWith('permit')) {
      add('permit_expired', 'warn', 'The permit\'s deadline has passed; submitting it will fail.', { ...where, deadline: x.deadline.toString() });
    }
  }
  const approving = x.kind === 'approve-all' ? x.approved : x.amount > 0n;
  if (approving && (whoKind === 'eoa' || whoKind === 'delegated-eoa')) {
    add('approval_to_eoa', 'warn', 'The approval goes to an externally owned account: legitimate protocols are contracts, drainers are often plain keys.', { ...where, spender: who, spenderKind: whoKind });
  }
}

function traceFindings(e: PreflightEvidence, add: Add): void {
  if (!e.trace) {
    if (e.simulation.ran && e.simulation.revert?.kind !== 'insufficient-funds') add('trace_unavailable', 'info', 'The node served no call trace (debug_traceCall): delegatecalls could not be checked, and without eth_simulateV1 neither could asset changes.');
    return;
  }
  const top = e.trace.delegatecalls.find((d) => d.forwarding && same(d.context, e.tx.to));
  if (top) add('proxy_destination', 'info', 'The destination is a proxy that forwards calls to an implementation contract, which can be replaced by its admin.', { proxy: top.context, implementation: top.target });
  const risky = e.trace.delegatecalls.filter((d) => !d.forwarding && !d.selfCall);
  if (risky.length > 0) {
    const inSender = risky.some((d) => d.inSenderContext);
    add('delegatecall_in_trace', 'warn', inSender
      ? 'Code from another contract runs as the sender\'s own account (delegatecall): it can move anything the account holds.'
      : 'The call runs code borrowed from another contract (delegatecall) with the caller\'s storage and balance.', {
      inSenderContext: inSender,
      delegatecalls: risky.slice(0, 10).map((d) => ({ context: d.context, target: d.target, selector: d.selector, reverted: d.reverted })),
    });
  }
}

function usdcOutflow(e: PreflightEvidence, add: Add): void {
  // A direct USDC transfer is a payment the sender asked for in plain words; only USDC pulled
  // out through some other contract, with nothing coming back for it, is suspicious. USDC that
  // comes back is counted at face value (a refund of 1 micro-USDC does not make 100 USDC a
  // trade); any other asset coming back counts as a return, since this check cannot price it.
  const direct = same(e.tx.to, USDC) && e.decoded.actions.some((a) => a.kind === 'transfer' && a.path === '0');
  if (direct) return;
  const out = e.movements.filter((m) => same(m.token, USDC) && same(m.from, e.tx.from) && !same(m.to, e.tx.from));
  const total = out.reduce((s, m) => s + m.amount, 0n);
  if (total === 0n) return;
  const back = e.movements.filter((m) => same(m.to, e.tx.from) && !same(m.from, e.tx.from));
  if (back.some((m) => !same(m.token, USDC))) return;
  const returned = back.reduce((s, m) => s + m.amount, 0n);
  if (returned >= total) return;
  add('usdc_outflow_without_return', 'warn', returned === 0n
    ? 'USDC leaves the sender through a contract and nothing comes back.'
    : 'USDC leaves the sender through a contract and only part of it comes back, nothing else.', {
    amountMicro: total.toString(),
    returnedMicro: returned.toString(),
    recipients: [...new Set(out.map((m) => m.to))],
  });
}

function poisoning(e: PreflightEvidence, add: Add): void {
  if (e.counterparties === null) {
    if (e.counterpartiesFailed) add('poisoning_check_unavailable', 'info', 'The sender\'s recent USDC transfers could not be read: the address-poisoning check did not run.');
    return;
  }
  for (const r of recipientsOf(e)) {
    const lookalikes = e.counterparties.filter((k) => looksAlike(r, k));
    if (lookalikes.length > 0) {
      add('recipient_address_poisoning', 'block', 'The recipient looks like an address the sender paid before (same first and last 4 characters, different middle): a classic address-poisoning lure.', { recipient: r, resembles: lookalikes.slice(0, 5) });
    }
  }
}
