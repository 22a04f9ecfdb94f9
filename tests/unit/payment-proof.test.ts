import { describe, expect, it } from 'vitest';
import { BlockNotFoundError, encodeAbiParameters, encodeEventTopics, getAddress, MethodNotFoundRpcError, pad, parseAbi, RpcRequestError, type Hex } from 'viem';
import {
  finalityOf,
  gatherEvidence,
  judgePayment,
  type ExpectedPayment,
  type PaymentEvidence,
} from '../../src/features/reports/payment-proof.js';
import { decodeUsdcTransfers, publicTransfer, TRANSFER_TOPIC, type ReceiptLog } from '../../src/features/reports/usdc-transfers.js';
import type { ChainClient } from '../../src/platform/chain.js';
import { AppError } from '../../src/platform/errors.js';
import { USDC_ADDRESS } from '../../src/platform/prices.js';

const abi = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);
const PAYER = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8';
const PAYEE = '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC';
const OTHER = '0x90F79bf6EB2c4f870365E785982E1f101E93b906';
const FAKE_TOKEN = '0x1111111111111111111111111111111111111111';

function transferLog(from: string, to: string, value: bigint, logIndex: number, address: string = USDC_ADDRESS): ReceiptLog {
  return {
    address,
    topics: encodeEventTopics({ abi, eventName: 'Transfer', args: { from: from as Hex, to: to as Hex } }) as Hex[],
    data: encodeAbiParameters([{ type: 'uint256' }], [value]),
    logIndex,
  };
}

const transfers = (...logs: ReceiptLog[]) => decodeUsdcTransfers(logs);

function mined(logs: ReceiptLog[], over: Partial<PaymentEvidence> = {}): PaymentEvidence {
  return { found: true, mined: true, status: 'success', confirmations: 5, transfers: decodeUsdcTransfers(logs), finality: 'latest', ...over };
}

const expectPay = (over: Partial<ExpectedPayment> = {}): ExpectedPayment => ({ expectedTo: PAYEE, expectedAmount: 1_500_000n, ...over });

describe('decodeUsdcTransfers', () => {
  it('decodes a USDC Transfer into checksummed addresses, a decimal amount and the exact micro amount', () => {
    const [t, ...rest] = transfers(transferLog(PAYER.toLowerCase(), PAYEE.toLowerCase(), 1_500_000n, 7));
    expect(rest).toEqual([]);
    expect(t).toEqual({ from: PAYER, to: PAYEE, amount: '1.5', amountMicro: 1_500_000n, logIndex: 7 });
    expect(publicTransfer(t!)).toEqual({ from: PAYER, to: PAYEE, amount: '1.5', logIndex: 7 });
  });

  it('matches the emitting contract case-insensitively', () => {
    for (const address of [USDC_ADDRESS.toLowerCase(), USDC_ADDRESS.toUpperCase().replace('0X', '0x'), USDC_ADDRESS]) {
      expect(transfers(transferLog(PAYER, PAYEE, 1n, 0, address))).toHaveLength(1);
    }
  });

  it('ignores Transfer logs of any other contract, even with the same topic and shape', () => {
    const logs = [transferLog(PAYER, PAYEE, 1_500_000n, 0, FAKE_TOKEN), transferLog(PAYER, OTHER, 2n, 1)];
    expect(logs[0]!.topics[0]).toBe(TRANSFER_TOPIC);
    expect(transfers(...logs).map((t) => t.logIndex)).toEqual([1]);
  });

  it('ignores other USDC events and malformed or removed Transfer logs', () => {
    const good = transferLog(PAYER, PAYEE, 3n, 4);
    const approval: ReceiptLog = { ...good, topics: [pad('0x8c5be1e5', { dir: 'right' }), ...good.topics.slice(1)], logIndex: 0 };
    const missingTopic: ReceiptLog = { ...good, topics: good.topics.slice(0, 2), logIndex: 1 };
    const shortData: ReceiptLog = { ...good, data: '0x01', logIndex: 2 };
    const removed: ReceiptLog = { ...good, removed: true, logIndex: 3 };
    const noTopics: ReceiptLog = { ...good, topics: [], logIndex: 5 };
    expect(transfers(approval, missingTopic, shortData, removed, good, noTopics).map((t) => t.logIndex)).toEqual([4]);
  });

  it('keeps every USDC transfer in log order, including mints and tiny or huge amounts', () => {
    const zero = '0x0000000000000000000000000000000000000000';
    const out = transfers(transferLog(zero, PAYEE, 1n, 0), transferLog(PAYER, PAYEE, 10n ** 30n, 1), transferLog(PAYEE, OTHER, 0n, 2));
    expect(out.map((t) => [t.from, t.amount, t.amountMicro])).toEqual([
      [zero, '0.000001', 1n],
      [PAYER, '1000000000000000000000000', 10n ** 30n],
      [PAYEE, '0', 0n],
    ]);
  });
});

describe('judgePayment', () => {
  it('VERIFIED: a transfer to the recipient of the exact amount, addresses in any letter case', () => {
    const ev = mined([transferLog(PAYER, PAYEE, 1_500_000n, 3)]);
    for (const expectedTo of [PAYEE, PAYEE.toLowerCase(), `0x${PAYEE.slice(2).toUpperCase()}`]) {
      const j = judgePayment(expectPay({ expectedTo }), ev, 1);
      expect(j).toMatchObject({ verdict: { decision: 'VERIFIED', verified: true }, mismatches: [], matchedLogIndex: 3 });
    }
  });

  it.each([
    ['one micro-USDC short', 1_499_999n, '1.499999'],
    ['one micro-USDC over', 1_500_001n, '1.500001'],
  ])('MISMATCH on amount when %s', (_label, paid, observed) => {
    const j = judgePayment(expectPay(), mined([transferLog(PAYER, PAYEE, paid, 0)]), 1);
    expect(j.verdict).toEqual({ decision: 'MISMATCH', verified: false });
    expect(j.mismatches).toEqual([{ field: 'amount', expected: '1.5', observed }]);
    expect(j.matchedLogIndex).toBeNull();
  });

  it('MISMATCH on to when the exact amount went elsewhere', () => {
    const j = judgePayment(expectPay(), mined([transferLog(PAYER, OTHER, 1_500_000n, 0)]), 1);
    expect(j.mismatches).toEqual([{ field: 'to', expected: PAYEE, observed: OTHER }]);
  });

  it('checks expectedFrom (any letter case) only when given', () => {
    const ev = mined([transferLog(PAYER, PAYEE, 1_500_000n, 0)]);
    expect(judgePayment(expectPay({ expectedFrom: PAYER.toLowerCase() }), ev, 1).verdict.decision).toBe('VERIFIED');
    const wrong = judgePayment(expectPay({ expectedFrom: OTHER.toLowerCase() }), ev, 1);
    expect(wrong.verdict).toEqual({ decision: 'MISMATCH', verified: false });
    expect(wrong.mismatches).toEqual([{ field: 'from', expected: OTHER, observed: PAYER }]);
  });

  it('lists every differing field of a transfer that matches nothing', () => {
    const j = judgePayment(expectPay({ expectedFrom: OTHER }), mined([transferLog(PAYER, FAKE_TOKEN, 2n, 0)]), 1);
    expect(j.mismatches.map((m) => m.field)).toEqual(['to', 'amount', 'from']);
    expect(j.mismatches[0]).toEqual({ field: 'to', expected: PAYEE, observed: getAddress(FAKE_TOKEN) });
  });

  it('VERIFIED when only the second of several transfers matches; amounts are never summed', () => {
    const logs = [transferLog(PAYER, PAYEE, 500_000n, 0), transferLog(PAYER, PAYEE, 1_500_000n, 1), transferLog(PAYEE, OTHER, 1_500_000n, 2)];
    expect(judgePayment(expectPay(), mined(logs), 1)).toMatchObject({ verdict: { decision: 'VERIFIED' }, matchedLogIndex: 1 });
    const split = [transferLog(PAYER, PAYEE, 1_000_000n, 0), transferLog(PAYER, PAYEE, 500_000n, 1)];
    expect(judgePayment(expectPay(), mined(split), 1).verdict.decision).toBe('MISMATCH');
  });

  it('compares against the closest transfer: the recipient first, then the amount, then the sender', () => {
    // The exact amount to a stranger ranks below a wrong amount to the recipient.
    const a = judgePayment(expectPay(), mined([transferLog(PAYER, OTHER, 1_500_000n, 0), transferLog(PAYER, PAYEE, 1n, 1)]), 1);
    expect(a.mismatches).toEqual([{ field: 'amount', expected: '1.5', observed: '0.000001' }]);
    // To the recipient, the right amount from the wrong sender beats the wrong amount from the right one.
    const logs = [transferLog(PAYER, PAYEE, 2n, 0), transferLog(OTHER, PAYEE, 1_500_000n, 1)];
    const b = judgePayment(expectPay({ expectedFrom: PAYER }), mined(logs), 1);
    expect(b.mismatches).toEqual([{ field: 'from', expected: PAYER, observed: OTHER }]);
    // Equally close transfers: the earliest log is the one reported.
    const tie = judgePayment(expectPay(), mined([transferLog(PAYER, PAYEE, 1n, 0), transferLog(PAYER, PAYEE, 2n, 1)]), 1);
    expect(tie.mismatches).toEqual([{ field: 'amount', expected: '1.5', observed: '0.000001' }]);
  });

  it('MISMATCH with an explicit reason and no field list when the transaction moved no USDC', () => {
    const fakeOnly = mined([transferLog(PAYER, PAYEE, 1_500_000n, 0, FAKE_TOKEN)]);
    for (const ev of [mined([]), fakeOnly]) {
      const j = judgePayment(expectPay(), ev, 1);
      expect(j).toEqual({ verdict: { decision: 'MISMATCH', verified: false }, reason: 'no USDC transfer in the transaction', mismatches: [], matchedLogIndex: null });
    }
  });

  it('FAILED when the transaction reverted', () => {
    const j = judgePayment(expectPay(), mined([], { status: 'reverted' }), 1);
    expect(j).toMatchObject({ verdict: { decision: 'FAILED', verified: false }, reason: 'transaction reverted', mismatches: [] });
  });

  it('PENDING below the required confirmations, whatever the outcome so far', () => {
    const logs = [transferLog(PAYER, PAYEE, 1_500_000n, 0)];
    const shallow = judgePayment(expectPay(), mined(logs, { confirmations: 2 }), 3);
    expect(shallow).toMatchObject({ verdict: { decision: 'PENDING', verified: false }, reason: '2 of 3 required confirmations', mismatches: [] });
    expect(judgePayment(expectPay(), mined([], { confirmations: 1, status: 'reverted' }), 3).verdict.decision).toBe('PENDING');
    expect(judgePayment(expectPay(), mined(logs, { confirmations: 3 }), 3).verdict.decision).toBe('VERIFIED');
    expect(judgePayment(expectPay(), mined(logs, { confirmations: 1 }), 0).verdict.decision).toBe('VERIFIED');
  });

  it('PENDING when known but not mined, NOT_FOUND when unknown', () => {
    const base: PaymentEvidence = { found: true, mined: false, confirmations: 0, transfers: [], finality: null };
    expect(judgePayment(expectPay(), base, 0)).toMatchObject({ verdict: { decision: 'PENDING', verified: false }, reason: 'transaction not yet mined' });
    const gone = judgePayment(expectPay(), { ...base, found: false }, 1);
    expect(gone).toEqual({ verdict: { decision: 'NOT_FOUND', verified: false }, reason: 'transaction not found on Base', mismatches: [], matchedLogIndex: null });
  });
});

describe('finalityOf', () => {
  it.each([
    [10n, 20n, 10n, 'finalized'],
    [11n, 20n, 10n, 'safe'],
    [20n, 20n, 10n, 'safe'],
    [21n, 20n, 10n, 'latest'],
    [5n, -1n, -1n, 'latest'],
    [5n, null, 10n, 'finalized'],
    [15n, null, 10n, 'latest'],
    [5n, 10n, null, 'safe'],
    [5n, null, null, null],
  ] as const)('block %s with safe %s and finalized %s is %s', (block, safe, finalized, label) => {
    expect(finalityOf(block, safe, finalized)).toBe(label);
  });
});

describe('gatherEvidence', () => {
  const HASH = `0x${'ab'.repeat(32)}` as const;
  /** "Method not found" for a block tag, as viem raises it, with the HTTP status the node answered with. */
  const tagRefused = (status?: number) =>
    new MethodNotFoundRpcError(new RpcRequestError({ body: {}, error: { code: -32601, message: 'the method does not exist' }, url: 'http://node.invalid', status }));
  /** A Base node whose receipt for HASH is in block 100, its head at `head`, and its tags as `tag` says. */
  function node(head: bigint, tag: (blockTag: string) => Promise<{ number: bigint }>): ChainClient {
    return {
      getChainId: async () => 8453,
      getTransactionReceipt: async () => ({ transactionHash: HASH, status: 'success', blockNumber: 100n, logs: [transferLog(PAYER, PAYEE, 1_500_000n, 0)] }),
      getBlockNumber: async () => head,
      getBlock: async ({ blockTag }: { blockTag: string }) => tag(blockTag),
    } as unknown as ChainClient;
  }

  it('counts a mined transaction as 1 confirmation when the head read lags behind its block (a load-balanced node)', async () => {
    const { evidence } = await gatherEvidence(node(98n, async () => ({ number: 90n })), HASH);
    expect(evidence.confirmations).toBe(1);
    expect(judgePayment(expectPay(), evidence, 1).verdict.decision).toBe('VERIFIED');
  });

  it('reads a block tag the node does not serve as no finality, but a server error saying the same as unreadable (502)', async () => {
    const { evidence } = await gatherEvidence(node(104n, () => Promise.reject(tagRefused())), HASH);
    expect(evidence).toMatchObject({ confirmations: 5, finality: null });
    const failing = gatherEvidence(node(104n, () => Promise.reject(tagRefused(503))), HASH);
    await expect(failing).rejects.toBeInstanceOf(AppError);
    await expect(failing).rejects.toMatchObject({ code: 'upstream_unavailable' });
    // Another JSON-RPC error (an internal error) is no word on the tag either: 502.
    const internal = new RpcRequestError({ body: {}, error: { code: -32603, message: 'internal error' }, url: 'http://node.invalid' });
    await expect(gatherEvidence(node(104n, () => Promise.reject(internal)), HASH)).rejects.toMatchObject({ code: 'upstream_unavailable' });
  });

  it('labels finality latest when the node serves the tags but has no such block yet', async () => {
    const { evidence } = await gatherEvidence(node(104n, () => Promise.reject(new BlockNotFoundError({ blockNumber: undefined, blockHash: undefined }))), HASH);
    expect(evidence.finality).toBe('latest');
  });
});
