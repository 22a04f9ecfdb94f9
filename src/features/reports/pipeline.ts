import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type TSchema } from 'typebox';
import type { ChainClient } from '../../platform/chain.js';
import type { AppDeps } from '../../app.js';
import { digestOf } from '../../platform/canonical.js';
import { writeTransaction } from '../../platform/db/tx.js';
import { AppError } from '../../platform/errors.js';
import { compileBodyValidator, noStore } from '../../platform/http.js';
import { sourceOf } from '../../platform/rate-limit.js';
import { newId } from '../../platform/ids.js';
import { NETWORK, PAID_REPORTS, priceMicro, type PaidReportName } from '../../platform/prices.js';
import type { ReceiptSigner } from '../../platform/receipts.js';
import { problems, RetryAfterHeader } from '../../platform/schemas.js';
import { challengeProblem, paymentIdentity, type GateResult, type PaymentGateway } from '../../platform/x402.js';
import { OrderStore, type OrderRow } from '../orders/store.js';
import { PendingReport, ReportReceipt } from './report-schemas.js';
import { SettlementService, type Delivery } from './settlement.js';
import { PaidReportStore, type PaidReportRow } from './store.js';

export interface PaidReportDef {
  name: PaidReportName;
  body: TSchema | null;
  response: TSchema;
  summary: string;
  description: string;
  example?: Record<string, unknown>;
  /**
   * Checks the schema cannot express (a number's range, say); throws a 400 AppError whose paths
   * start with `part`, where the input sits in the request ('body' on the report's own route,
   * 'body/input' in a recovery order). Runs before anything about payment, like the schema
   * itself; reportInputValidator runs both wherever a report's input is accepted.
   */
  check?(input: any, part?: string): void;
  produce(input: any, now: Date): Promise<Record<string, unknown>>;
  /**
   * The report is about whichever chain the RPC serves (the quick check): the block the payment's
   * later lookup starts from is read without asking the RPC for Base first, as before any report
   * read checked it, so that its buyer gets the FAIL naming the chain id rather than a 502.
   */
  readsAnyChain?: boolean;
}

/**
 * The one validation of a report's input outside its own route (a recovery order's input): the
 * report's body schema, compiled as Fastify compiles request bodies, then the report's check.
 * An input it accepts is one the paid route accepts, and the reverse; errors name `part`.
 */
export function reportInputValidator(def: PaidReportDef, part: string): (input: unknown) => void {
  const schema = compileBodyValidator(def.body ?? Type.Object({}, { additionalProperties: false }), part);
  return (input) => {
    schema(input);
    def.check?.(input, part);
  };
}

export interface PaymentDeps extends AppDeps {
  gateway: PaymentGateway;
  chain: ChainClient;
  /** The same RPC URLs, no chain asked first (see PaidReportDef.readsAnyChain). */
  anyChain: ChainClient;
  receipts: ReceiptSigner;
}

/**
 * One payment pipeline for every paid report, in the order DESIGN.md fixes: validate (Fastify,
 * before anything here) -> 402 challenge -> facilitator verify -> produce -> store durably ->
 * settle -> 200. A payment is never settled for a report that was not stored, and one
 * authorization buys one report: its payer:nonce is a unique key in storage.
 *
 * One step comes before verify that DESIGN.md's order leaves out: the lookup of that payer:nonce.
 * The facilitator refuses a nonce already used on chain, so a retry of a settled purchase (same
 * payment, same input) could never get its stored report back if verify came first; the lookup
 * compares the whole payment payload and the input, so it hands nothing to anyone else.
 */
export class PaidReports {
  readonly store: PaidReportStore;
  readonly orders: OrderStore;
  readonly settlement: SettlementService;

  constructor(private readonly deps: PaymentDeps) {
    this.store = new PaidReportStore(deps.database);
    this.orders = new OrderStore(deps.database, deps.config.recoveryTtlSeconds);
    this.settlement = new SettlementService(deps, this.store);
  }

  register(app: FastifyInstance, def: PaidReportDef): void {
    const report = PAID_REPORTS[def.name];
    app.route({
      method: report.method,
      url: report.path,
      // A HEAD request cannot carry a paid report; answering it as GET would mean a 402 for nothing.
      exposeHeadRoute: false,
      // A paid answer is for this caller only: a report with its payer's receipt, a one-time
      // recovery key, or a challenge (the quick check is a GET; PAYMENT-SIGNATURE is not in Vary).
      onSend: noStore,
      schema: {
        tags: ['paid reports'],
        // The report's name in the price table and the catalogue, so that generated clients call it that.
        operationId: def.name,
        summary: `${def.summary} (x402: ${report.price} USDC)`,
        description: `${def.description}\n\nCharged ${report.price} USDC per delivered report, INCOMPLETE or negative results included. Without PAYMENT-SIGNATURE the answer is 402 with PAYMENT-REQUIRED (nothing charged). The same PAYMENT-SIGNATURE again returns the stored report without a second charge (another input: 409) for ${this.deps.config.paidReplayWindowSeconds} s after an answer first carried it; past that it is 409 whatever the input (a settled payment's signature is public on chain). Send Report-Id and Recovery-Key (from POST /api/orders) to be able to restore the report through POST /api/orders/recover. A source whose payments the facilitator refused ${this.deps.config.refusedPaymentLimit} times within an hour gets 429 with Retry-After for the rest of that hour, before any facilitator call (a report it already bought is still delivered).`,
        security: [{ x402: [] }],
        headers: {
          type: 'object',
          properties: {
            'payment-signature': { type: 'string', description: 'x402 v2 payment authorization (base64 JSON)' },
            'report-id': { type: 'string', pattern: '^ord_[0-9a-f]{32}$', description: 'Recovery order id' },
            'recovery-key': { type: 'string', maxLength: 100, description: 'Recovery order key' },
          },
        },
        ...(def.body ? { body: def.body } : {}),
        response: {
          200: {
            ...def.response,
            properties: { ...(def.response as { properties: object }).properties, receipt: ReceiptSchemaRef },
            headers: PaymentResponseHeader,
          },
          202: { ...PendingReport, headers: RetryAfterHeader },
          // A body is read (and can be too large or of another type) only where there is one.
          ...problems(400, 404, 409, 410, 412, ...(def.body ? [413, 415] : []), 429, 502, 503),
          402: ChallengeProblem,
          412: { ...problems(412)[412], description: 'Precondition failed: the payment needs an allowance granted first (PAYMENT-REQUIRED says which); nothing charged', headers: PaymentRequiredHeader },
        },
      },
      handler: (request, reply) => this.handle(def, request, reply),
    });
  }

  private async handle(def: PaidReportDef, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const now = this.deps.clock.now();
    const path = PAID_REPORTS[def.name].path;
    const input = def.body ? request.body : {};
    // Fastify has validated the body against def.body already (the same schema and compiler
    // reportInputValidator uses); what is left is the report's own check.
    def.check?.(input, 'body');
    const inputDigest = digestOf({ path, input });
    const order = await this.boundOrder(request, path, inputDigest, now);
    const signature = header(request, 'payment-signature');
    if (order?.report_id) {
      // A bound order delivers its report. One whose payment failed may be paid again, unless the
      // chain now shows that payment after all (a refusal racing a transfer the payer submitted,
      // read then from an RPC a block behind): looked for before a second payment is taken.
      const bound = await this.mustLoad(order.report_id);
      if (bound.status !== 'failed') return this.deliver(request, reply, await this.settlement.resume(bound));
      const landed = signature ? await this.settlement.landedAfterRefusal(bound) : undefined;
      if (landed) return this.deliver(request, reply, landed);
    }

    if (!signature) {
      await this.storageReachable();
      return this.sendGate(def, await this.deps.gateway.gate(request), false);
    }
    const payment = await this.identify(def, request, signature);
    const existing = await this.guardStorage(() => this.store.byAuth(payment.authId));
    // The same purchase as a stored one (this authorization, for this input and order).
    const purchase: Purchase = { path, inputDigest, paymentDigest: payment.digest, order, now };
    if (existing) return this.resumePurchase(request, reply, existing, purchase);

    // A copy of this request (a client's retry, or the same request at another instance) may have
    // stored and settled this authorization while this one was at the facilitator, which then
    // refuses it as used, or does not answer in time. That payment bought this report: deliver
    // it, never ask for another payment or say that nothing was charged.
    // Whether it delivered is a boolean, not the reply: a FastifyReply is a thenable that
    // resolves to undefined once sent, so awaiting one never tells that anything was sent.
    const meanwhile = async (): Promise<boolean> => {
      const row = await this.guardStorage(() => this.store.byAuth(payment.authId));
      if (!row) return false;
      await this.resumePurchase(request, reply, row, purchase);
      return true;
    };
    /** This request failed after its payment was sent: a copy's report, else the failure (see sameSignatureAgain). */
    const failedAfterPayment = async (err: unknown): Promise<FastifyReply> => {
      if (await meanwhile()) return reply;
      throw sameSignatureAgain(err);
    };
    // Every payment sent on costs a facilitator call: a source whose payments keep being refused
    // (made-up or unfunded authorizations) is stopped here, before the facilitator. Each payment
    // counts as refused until the facilitator says otherwise, so concurrent ones cannot all pass.
    const unrefused = await this.deps.limiter.reserve('refusedPayments', sourceOf(request.ip));
    let gate: GateResult;
    try {
      gate = await this.deps.gateway.gate(request, signature);
    } catch (err) {
      await unrefused();
      if (!(err instanceof AppError && err.code === 'upstream_unavailable')) throw err;
      return failedAfterPayment(err);
    }
    if (gate.kind === 'respond') {
      if (await meanwhile()) {
        await unrefused();
        return reply;
      }
      return this.sendGate(def, gate, true);
    }
    await unrefused();
    let fromBlock: bigint;
    let produced: Record<string, unknown>;
    try {
      const head = await (def.readsAnyChain ? this.deps.anyChain : this.deps.chain).getBlockNumber({ cacheTime: 0 }).catch(() => {
        throw new AppError('upstream_unavailable', 'the chain could not be read; nothing was charged');
      });
      // Where a search for this payment's settlement starts. Anyone holding the signed
      // authorization (the payer's wallet, a relayer) can put it on chain from the moment verify
      // said its nonce was unused, which may be blocks before this read (or the facilitator's node
      // may lag ours): starting at the head would never find such a transfer, and the buyer would
      // be charged with the report held back for good.
      fromBlock = head > SETTLEMENT_LOOKBACK_BLOCKS ? head - SETTLEMENT_LOOKBACK_BLOCKS : 0n;
      produced = await def.produce(input, now);
    } catch (err) {
      // Verify passed, so a copy of this request may have stored and settled this authorization
      // while this one read the chain or made its report: that copy's report is what the payment
      // bought. A 502 here ("nothing was charged", "try again later") would send the client to
      // sign a second payment for a report it has already paid for.
      return failedAfterPayment(err);
    }

    const storedAt = this.deps.clock.now().toISOString();
    const row: PaidReportRow = {
      id: newId('rpt'),
      path,
      input_digest: inputDigest,
      input: JSON.stringify(input),
      report: JSON.stringify(produced),
      receipt: null,
      price_micro: priceMicro(def.name),
      network: NETWORK,
      pay_to: gate.requirements.payTo,
      payer: payment.payer,
      auth_id: payment.authId,
      payment_digest: payment.digest,
      payment: JSON.stringify({ payload: gate.payload, requirements: gate.requirements, extensions: gate.extensions ?? null }),
      status: 'stored',
      settle_tx: null,
      failure: null,
      from_block: fromBlock,
      order_id: order?.id ?? null,
      // When the report is stored, not when the request began: the settle starts now, and a
      // replay leaves a row alone for 2 × facilitatorTimeoutMs + 30 s from this moment (resume),
      // however long verify and produce took before it.
      created_at: storedAt,
      settled_at: null,
      // The first settle, sent right after the row is stored, holds the lease (claimSettle).
      settle_started_at: storedAt,
      delivered_at: null,
    };
    const stored = await this.storeWithOrder(row, order, path, input, inputDigest, now);
    if (!stored.inserted) return this.resumePurchase(request, reply, await this.mustLoadByAuth(payment.authId), purchase);
    return this.deliver(request, reply, await this.settlement.settleNew(row, stored.recoveryKey));
  }

  /** A paid request may name a recovery order; it must be for this very report and input. */
  private async boundOrder(request: FastifyRequest, path: string, inputDigest: string, now: Date): Promise<OrderRow | undefined> {
    const id = header(request, 'report-id');
    const key = header(request, 'recovery-key');
    if (!id && !key) return undefined;
    if (!id || !key) throw new AppError('invalid_request', 'send both Report-Id and Recovery-Key, or neither');
    const order = await this.guardStorage(() => this.orders.open(id, key, now));
    if (order.path !== path || order.input_digest !== inputDigest) {
      throw new AppError('payment_conflict', 'the recovery order was created for another report or input');
    }
    return order;
  }

  /** Report and (when the caller brought none) a recovery order, in one transaction. */
  private async storeWithOrder(row: PaidReportRow, order: OrderRow | undefined, path: string, input: unknown, inputDigest: string, now: Date) {
    return this.guardStorage(() =>
      writeTransaction(this.deps.database, async (tx) => {
        const scoped = { ...this.deps.database, db: tx } as typeof this.deps.database;
        const inserted = await new PaidReportStore(scoped).insert(row);
        if (!inserted) return { inserted: false as const, recoveryKey: undefined };
        if (order) {
          const bound = await new OrderStore(scoped, this.deps.config.recoveryTtlSeconds).bind(order, row.id, now);
          // Rolls the stored report back: nothing was settled for it.
          if (!bound) throw new AppError('payment_conflict', 'another payment for this recovery order is in progress; restore it instead of paying again');
          return { inserted: true as const, recoveryKey: undefined };
        }
        const created = await new OrderStore(scoped, this.deps.config.recoveryTtlSeconds).create(path, input, inputDigest, now, row.id);
        row.order_id = created.row.id;
        await tx.updateTable('paid_reports').set({ order_id: created.row.id }).where('id', '=', row.id).execute();
        return { inserted: true as const, recoveryKey: created.key };
      }),
    );
  }

  /** The report an authorization already bought, if this request is the same purchase. */
  private async resumePurchase(request: FastifyRequest, reply: FastifyReply, row: PaidReportRow, purchase: Purchase): Promise<FastifyReply> {
    const { path, inputDigest, paymentDigest, order, now } = purchase;
    this.checkSamePurchase(row, path, inputDigest, paymentDigest);
    // A copy of this payment sent without the order's headers (a retry that lost them) stored the
    // report first, under an order of its own: the order this request names is bound to it too,
    // else it would answer "no payment has been received" and its holder would pay again. (Not
    // when the order holds another payment still in force: bind refuses, and one order never
    // buys two reports.)
    if (order && order.report_id !== row.id) {
      await this.guardStorage(() => this.orders.bind(order, row.id, now)).catch((err: unknown) => {
        // Purged meanwhile: there is nothing left to bind, and the payment's report is still due.
        if (!(err instanceof AppError && err.code === 'recovery_expired')) throw err;
      });
    }
    const d = await this.settlement.resume(row);
    // A 202 names the order to restore from: the caller's own, whose key it holds.
    return this.deliver(request, reply, d.kind === 'pending' && order ? { ...d, body: { ...d.body, orderId: order.id } } : d);
  }

  private checkSamePurchase(row: PaidReportRow, path: string, inputDigest: string, paymentDigest: string): void {
    // A settled payment's signature is public: EIP-3009's transferWithAuthorization carries the
    // whole authorization and its signature in calldata, and the rest of the x402 payload is the
    // public challenge. Anyone can rebuild it from the chain and, with a guess of the input, would
    // be handed a report someone else bought. So the signature alone brings a report back only
    // while its purchase is in flight (a client's retry, an answer cut off) and for
    // PAID_REPLAY_WINDOW_SECONDS after an answer carrying it was first written out in full (an
    // answer lost on its way, retried). Past that, the same answer whatever
    // the input, so that it tells an outsider nothing about what was bought. The order's
    // Report-Id and Recovery-Key, never on chain, still restore the report.
    const delivered = row.delivered_at === null ? undefined : Date.parse(row.delivered_at);
    if (delivered !== undefined && this.deps.clock.now().getTime() - delivered > this.deps.config.paidReplayWindowSeconds * 1000) {
      throw new AppError(
        'payment_conflict',
        'this payment authorization was already used, and the report it bought was delivered; a payment is never accepted again (a lost report is restored by POST /api/orders/recover with the Report-Id and Recovery-Key of an order made before paying, or given in a 202)',
      );
    }
    if (row.path !== path || row.input_digest !== inputDigest) {
      throw new AppError('payment_conflict', 'this payment authorization already bought a report for another input');
    }
    if (row.payment_digest !== paymentDigest) {
      throw new AppError('payment_conflict', 'a different payment payload reuses this authorization nonce');
    }
  }

  private async storageReachable(): Promise<void> {
    await this.guardStorage(() => this.deps.database.ping());
  }

  /**
   * Storage failures are 503; AppErrors pass through. Every read or write this guards comes before
   * this request settles anything, so the request charged nothing, but an earlier one with the
   * same payment or order may have: the answer must not tell the caller to pay again.
   */
  async guardStorage<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof AppError) throw err;
      throw new AppError(
        'storage_unavailable',
        'durable report storage is unavailable, and this request charged nothing; retry it later, with the same PAYMENT-SIGNATURE or Report-Id and Recovery-Key if it carried them: a payment already made is never charged again, and its report is delivered',
      );
    }
  }

  private async mustLoad(id: string): Promise<PaidReportRow> {
    const row = await this.guardStorage(() => this.store.byId(id));
    if (!row) throw new AppError('internal_error');
    return row;
  }

  private async mustLoadByAuth(authId: string): Promise<PaidReportRow> {
    const row = await this.guardStorage(() => this.store.byAuth(authId));
    if (!row) throw new AppError('internal_error');
    return row;
  }

  /**
   * The payment a PAYMENT-SIGNATURE header carries. A header that is no x402 v2 payment at all is
   * refused the way the facilitator refuses a bad one: 402 with the reason and a fresh challenge
   * to pay from (as x402 servers answer a header they cannot decode), never a charge.
   */
  private async identify(def: PaidReportDef, request: FastifyRequest, signature: string): Promise<ReturnType<typeof paymentIdentity>> {
    try {
      return paymentIdentity(signature);
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      await this.storageReachable();
      return this.sendGate(def, await this.deps.gateway.gate(request), true, err.message);
    }
  }

  /** The SDK's challenge as a problem answer (DESIGN.md: every non-2xx), its headers kept; `reason` replaces the SDK's. */
  private sendGate(def: PaidReportDef, gate: GateResult, paid: boolean, reason?: string): never {
    if (gate.kind !== 'respond') throw new AppError('internal_error');
    throw challengeProblem(reason === undefined ? gate : { ...gate, reason }, paid, PAID_REPORTS[def.name].price);
  }

  private async deliver(request: FastifyRequest, reply: FastifyReply, d: Delivery): Promise<FastifyReply> {
    for (const [k, v] of Object.entries(d.headers)) reply.header(k, v);
    if (d.kind === 'report') {
      this.settlement.recordDelivery(reply.raw, d.reportId);
      return reply.status(200).send({ ...d.report, receipt: d.receipt });
    }
    if (d.kind === 'pending') {
      reply.header('retry-after', String(d.body.retryAfter));
      return reply.status(202).send(d.body);
    }
    if (d.error.code !== 'payment_invalid') throw d.error;
    // A payment that could not be settled charged nothing, and every 402 carries the challenge
    // a client pays from (the settlement refused, or a replay of the refused authorization).
    // Without one (the facilitator gone meanwhile) the answer is no 402, which an x402 client
    // could not read, but the 502 an unpaid request would get then, with the refusal in it.
    const gate = await this.deps.gateway.gate(request).catch(() => undefined);
    if (gate?.kind !== 'respond') {
      throw new AppError('upstream_unavailable', `${d.error.message}; no new payment can be asked for now (the payment facilitator did not answer): retry later`);
    }
    throw new AppError('payment_invalid', `${d.error.message}; sign a new payment for the challenge in PAYMENT-REQUIRED`, { headers: gate.headers });
  }
}

/**
 * Blocks before the head (read right after verify) that a settlement search starts at: 200 s of
 * Base blocks, more than a facilitator request may take (FACILITATOR_TIMEOUT_MS) plus any lag
 * between the facilitator's node and ours. One eth_getLogs range covers it.
 */
export const SETTLEMENT_LOOKBACK_BLOCKS = 100n;

const ReceiptSchemaRef = ReportReceipt;

const PaymentResponseHeader = {
  'PAYMENT-RESPONSE': { type: 'string', description: 'The x402 v2 settlement response (base64 JSON: success, transaction, network, payer)' },
};
const PaymentRequiredHeader = {
  'PAYMENT-REQUIRED': { type: 'string', description: 'The x402 v2 challenge (base64 JSON: x402Version 2, accepts, resource, error) that an x402 client pays from' },
};
/** The 402 is a problem body like every non-2xx; x402 clients read the challenge from the header. */
const ChallengeProblem = {
  ...problems(402)[402],
  description:
    'Payment required (code payment_required: no PAYMENT-SIGNATURE was sent) or payment not accepted (code payment_invalid: the reason is in detail). The PAYMENT-REQUIRED header holds the x402 challenge; nothing is charged.',
  headers: PaymentRequiredHeader,
};

/** What a paid request buys, as resumePurchase compares it with a stored report: path, input, payment and the order it names. */
interface Purchase {
  path: string;
  inputDigest: string;
  paymentDigest: string;
  order: OrderRow | undefined;
  now: Date;
}

function header(request: FastifyRequest, name: string): string | undefined {
  const v = request.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * A failure of ours or an upstream's (5xx) after a payment was sent: this request charged
 * nothing, but a copy of it still under way (a retry the client sent elsewhere, the first answer
 * lost) may settle the same authorization after this answer. Its report is delivered to that
 * same PAYMENT-SIGNATURE, never to a new one: the answer says to send it again, not to sign anew.
 */
function sameSignatureAgain(err: unknown): unknown {
  if (!(err instanceof AppError) || err.status < 500) return err;
  const detail = `${err.message.replace(/\.$/, '')}; to try again, send the same PAYMENT-SIGNATURE (one payment is never charged twice)`;
  return new AppError(err.code, detail, { title: err.title, headers: err.headers, ...(err.retryAfter === undefined ? {} : { retryAfter: err.retryAfter }) });
}
