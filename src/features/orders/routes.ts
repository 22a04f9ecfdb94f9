import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { digestOf } from '../../platform/canonical.js';
import { AppError } from '../../platform/errors.js';
import { noStore } from '../../platform/http.js';
import { PAID_REPORTS, type PaidReportName } from '../../platform/prices.js';
import { DateTime, problems, RetryAfterHeader, StringEnum, Text } from '../../platform/schemas.js';
import { reportInputValidator, type PaidReportDef, type PaidReports } from '../reports/pipeline.js';
import { ReportReceipt } from '../reports/report-schemas.js';
import { TX_HASH_PATTERN } from '../reports/schemas.js';
import type { AppDeps } from '../../app.js';

const PATHS = Object.values(PAID_REPORTS).map((r) => r.path);
/** When to ask again about an unpaid order (Retry-After). */
const UNPAID_RETRY_SECONDS = 5;

const CreateOrder = Type.Object(
  {
    path: StringEnum(PATHS as [string, ...string[]], { description: 'The paid report this order is for' }),
    input: Type.Object({}, { additionalProperties: true, description: 'The request body of that report ({} for the quick check)' }),
  },
  { additionalProperties: false },
);
const CreatedOrder = Type.Object({
  id: Type.String({ pattern: '^ord_[0-9a-f]{32}$' }),
  key: Type.String({ description: 'Shown once: store it privately with the id, before paying' }),
  expiresAt: DateTime(),
});
const Recover = Type.Object(
  {
    id: Text({ maxLength: 100 }),
    key: Text({ maxLength: 100 }),
    txHash: Type.Optional(Type.String({ pattern: TX_HASH_PATTERN, description: 'Settlement transaction of an interrupted payment' })),
  },
  { additionalProperties: false },
);
const Restored = Type.Object({ report: Type.Object({}, { additionalProperties: true }), receipt: ReportReceipt });
/**
 * The 202 of recover: nothing charged yet (unpaid), or a payment whose settlement is not known yet
 * (pending, the fields of a paid report's pending answer but its one-time recovery key). One schema,
 * not a union with PendingReport: the serializer writes a union's first matching branch, so a
 * field added to the second would have been dropped without a word.
 */
const NotDelivered = Type.Object({
  status: StringEnum(['unpaid', 'pending'] as const),
  orderId: Type.String({ description: 'Ask again with this order: do not pay again' }),
  retryAfter: Type.Integer({ description: 'Seconds before asking again' }),
  reason: Type.String(),
});

export const orderRoutes: FastifyPluginAsyncTypebox<AppDeps & { reports: PaidReports; defs: PaidReportDef[] }> = async (app, deps) => {
  // An order's input must be a valid request for its report, checked exactly as the report checks
  // it (schema and the report's own check): an order the report would refuse could never be used.
  const validators = new Map<string, (v: unknown) => void>();
  for (const def of deps.defs) validators.set(PAID_REPORTS[def.name as PaidReportName].path, reportInputValidator(def, 'body/input'));

  // Order answers carry one-time keys and paid reports: no cache may keep them.
  app.addHook('onSend', noStore);

  app.post(
    '/api/orders',
    {
      onRequest: deps.limiter.hook('orderCreate'),
      schema: {
        tags: ['paid reports'],
        operationId: 'createOrder',
        summary: 'Create a recovery order before paying for a report',
        description: 'Store id and key privately, then send them as Report-Id and Recovery-Key with the paid request. Nothing is charged here.',
        body: CreateOrder,
        response: { 201: CreatedOrder, ...problems(400, 413, 415, 429, 503) },
      },
    },
    async (request, reply) => {
      const { path, input } = request.body;
      const validate = validators.get(path);
      if (!validate) throw new AppError('invalid_request', `${path} is not served by this deployment`);
      validate(input);
      const { row, key } = await deps.reports.guardStorage(() => deps.reports.orders.create(path, input, digestOf({ path, input }), deps.clock.now()));
      return reply.status(201).send({ id: row.id, key, expiresAt: row.expires_at });
    },
  );

  app.post(
    '/api/orders/recover',
    {
      schema: {
        tags: ['paid reports'],
        operationId: 'recoverOrder',
        summary: 'Restore a paid report without paying again',
        description:
          '200 with the original report and its receipt once the payment is settled; 202 while unpaid or pending (pending: do not pay again). Pass txHash for an interrupted payment that settled. ' +
          '410 once the recovery period has ended, also after the purge removed the order\'s input. When the payment the order waited for can no longer settle (refused, or its authorization cancelled or expired unused), nothing was charged and the order is unpaid again: 202 with status unpaid and the reason; pay again with the order\'s Report-Id and Recovery-Key.',
        body: Recover,
        response: {
          200: { ...Restored, description: 'The original report and its receipt: the payment settled' },
          202: { ...NotDelivered, description: 'Unpaid or pending: do not pay again; ask again after Retry-After', headers: RetryAfterHeader },
          ...problems(400, 404, 410, 413, 415, 503),
        },
      },
    },
    async (request, reply) => {
      const now = deps.clock.now();
      // Storage failures are 503 (as on the paid routes), never a 500.
      const order = await deps.reports.guardStorage(() => deps.reports.orders.open(request.body.id, request.body.key, now));
      const unpaid = (reason: string) => {
        reply.header('retry-after', String(UNPAID_RETRY_SECONDS));
        return reply.status(202).send({ status: 'unpaid' as const, orderId: order.id, retryAfter: UNPAID_RETRY_SECONDS, reason });
      };
      if (!order.report_id) return unpaid('no payment has been received for this order');
      const reportId = order.report_id;
      const row = await deps.reports.guardStorage(() => deps.reports.store.byId(reportId));
      if (!row) throw new AppError('not_found', 'unknown report or incorrect key');
      const d = await deps.reports.settlement.resume(row, request.body.txHash);
      if (d.kind === 'report') {
        deps.reports.settlement.recordDelivery(reply.raw, d.reportId);
        return reply.status(200).send({ report: d.report, receipt: d.receipt as never });
      }
      if (d.kind === 'pending') {
        reply.header('retry-after', String(d.body.retryAfter));
        // The order asked about, which a copy of its payment sent without its headers may not
        // be the report's own (see resumePurchase).
        const { recoveryKey: _unused, ...body } = d.body;
        return reply.status(202).send({ ...body, orderId: order.id });
      }
      // The payment it waited for can no longer settle (refused, cancelled, expired unused):
      // nothing was charged, and the order is unpaid again (the specification's states of an
      // order: unpaid or pending 202, available 200, expired 410).
      if (d.error.code === 'payment_invalid') return unpaid(`${d.error.message}: pay again with this order's Report-Id and Recovery-Key`);
      throw d.error;
    },
  );
};
