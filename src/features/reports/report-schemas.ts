import { Type } from 'typebox';
import { DateTime } from '../../platform/schemas.js';

export const ReceiptSubject = Type.Object({
  reportId: Type.String(),
  path: Type.String(),
  inputDigest: Type.String({ description: 'sha256 over the canonical JSON of { path, input }' }),
  reportDigest: Type.String({ description: 'sha256 over the canonical JSON of the report (without its receipt)' }),
  price: Type.String({ description: 'USDC charged' }),
  asset: Type.Literal('USDC'),
  payer: Type.String(),
  payTo: Type.String(),
  settlementTransaction: Type.String(),
  network: Type.String(),
  settledAt: DateTime(),
});

/** A paid report's receipt: the signed digest covers `subject`, which binds the report itself. */
export const ReportReceipt = Type.Object({
  receiptId: Type.String(),
  kind: Type.Literal('paid-report'),
  subjectId: Type.String(),
  digest: Type.String(),
  issuedAt: DateTime(),
  keyId: Type.String(),
  alg: Type.Literal('EdDSA'),
  signature: Type.String(),
  subject: ReceiptSubject,
});

export const PendingReport = Type.Object(
  {
    status: Type.Literal('pending'),
    orderId: Type.String({ description: 'Restore the report with POST /api/orders/recover; do not pay again' }),
    recoveryKey: Type.Optional(Type.String({ description: 'Present when the service created the order for this request: store it, it is shown once' })),
    retryAfter: Type.Integer({ description: 'Seconds before asking again' }),
    reason: Type.String(),
  },
  { description: 'Pending report or uncertain settlement; restore the report, do not create another payment' },
);
