// The response guard of tests/helpers/schema.ts: a property a response schema does not declare,
// which Fastify's serializer would silently drop, fails the test.
import { describe, expect, it } from 'vitest';
import { Type } from 'typebox';
import { Value } from 'typebox/value';
import { closedSchema, expectMatchesSchema } from '../helpers/schema.js';

const Finding = Type.Object({ code: Type.String(), evidence: Type.Record(Type.String(), Type.Unknown()) });
const Report = Type.Object({
  verdict: Type.Object({ decision: Type.String(), score: Type.Union([Type.Integer(), Type.Null()]) }),
  findings: Type.Array(Finding),
  token: Type.Union([Type.Object({ symbol: Type.String() }), Type.Null()]),
  open: Type.Object({}, { additionalProperties: true }),
  note: Type.Optional(Type.String()),
});
const good = { verdict: { decision: 'ALLOW', score: null }, findings: [{ code: 'x', evidence: { any: 1 } }], token: null, open: { anything: true } };

describe('expectMatchesSchema', () => {
  it('passes a value that has only declared properties, also through nullable branches, records and open objects', () => {
    expectMatchesSchema(Report, good);
    expectMatchesSchema(Report, { ...good, token: { symbol: 'USDC' }, note: 'n' });
  });

  it('fails on an undeclared property at any depth, which Value.Errors alone accepts', () => {
    for (const bad of [
      { ...good, extra: 1 },
      { ...good, verdict: { ...good.verdict, reasons: [] } },
      { ...good, findings: [{ code: 'x', evidence: {}, severity: 'warn' }] },
      { ...good, token: { symbol: 'USDC', decimals: 6 } },
    ]) {
      expect([...Value.Errors(Report, bad)]).toEqual([]);
      expect(() => expectMatchesSchema(Report, bad)).toThrow(/does not declare/);
    }
  });

  it('follows the serializer through anyOf: the first branch whose open schema accepts the value is the one written', () => {
    const Narrow = Type.Object({ status: Type.String() });
    const Wide = Type.Object({ status: Type.String(), recoveryKey: Type.String() });
    // {status, recoveryKey} matches the open Narrow first and would be written without recoveryKey.
    expect(() => expectMatchesSchema(Type.Union([Narrow, Wide]), { status: 'pending', recoveryKey: 'k' })).toThrow(/does not declare/);
    expectMatchesSchema(Type.Union([Wide, Narrow]), { status: 'pending', recoveryKey: 'k' });
    expectMatchesSchema(Type.Union([Wide, Narrow]), { status: 'pending' });
  });

  it('leaves the published schema itself untouched', () => {
    const before = JSON.stringify(Report);
    closedSchema(Report);
    expect(JSON.stringify(Report)).toBe(before);
    expect('additionalProperties' in Report).toBe(false);
  });
});
