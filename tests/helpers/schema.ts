import { expect } from 'vitest';
import type { TSchema } from 'typebox';
import { Value } from 'typebox/value';

/**
 * The response guard. Fastify writes a response with fast-json-stringify from the route's
 * response schema, which silently leaves out every property the schema does not declare (unless
 * it says additionalProperties). Value.Errors accepts extra properties, so a field added to a
 * report but not to its schema would vanish from the wire with every test still green.
 * expectMatchesSchema checks a value against a closed copy of the schema instead: a property the
 * serializer would drop fails the test.
 */
export function expectMatchesSchema(schema: TSchema, value: unknown): void {
  // As it would go on the wire: bigints are refused, undefined members and toJSON are applied.
  const wire: unknown = JSON.parse(JSON.stringify(value));
  // Value.Check first: listing the errors costs more, and is only needed when there are some.
  if (!Value.Check(schema, wire)) expect([...Value.Errors(schema, wire)], 'against the published schema').toEqual([]);
  const closed = closedSchema(schema);
  if (!Value.Check(closed, wire)) expect([...Value.Errors(closed, wire)], 'a property the response schema does not declare (the serializer drops it)').toEqual([]);
}

type Node = Record<string, unknown>;
const isNode = (v: unknown): v is Node => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Keywords whose value is one subschema, and those whose value maps names to subschemas. */
const ONE = ['additionalProperties', 'items', 'contains', 'not', 'propertyNames', 'unevaluatedProperties', 'unevaluatedItems'];
const MAP = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];

/**
 * A deep copy of `schema` as fast-json-stringify writes it:
 *  - every object schema that says nothing about additionalProperties gets additionalProperties:
 *    false (the serializer drops undeclared properties exactly there);
 *  - anyOf/oneOf: the serializer writes a value with the first branch whose *open* schema accepts
 *    it (an ajv check per branch, in order). So branch i accepts a value only if no earlier open
 *    branch does, and then only as its closed copy: a value that an earlier, narrower object
 *    branch catches is written with that branch's properties, and what only branch i declares
 *    would be lost; closing each branch on its own would miss that.
 * allOf is not used by any response schema; it is refused rather than guessed at (closing each
 * member would reject the properties the others declare).
 * The original is not touched; TypeBox's non-enumerable markers are kept on the copies.
 */
export function closedSchema(schema: TSchema): TSchema {
  let closed = CLOSED.get(schema);
  if (!closed) CLOSED.set(schema, (closed = close(schema as unknown as Node) as unknown as TSchema));
  return closed;
}
const CLOSED = new WeakMap<TSchema, TSchema>();

function close(node: Node): Node {
  const out = Object.defineProperties({}, Object.getOwnPropertyDescriptors(node)) as Node;
  if ('allOf' in node) throw new Error('closedSchema: allOf is not supported; decide how the serializer merges it first');
  for (const k of ONE) if (isNode(node[k])) out[k] = close(node[k]);
  if (Array.isArray(node.items)) out.items = (node.items as Node[]).map(close);
  if (Array.isArray(node.prefixItems)) out.prefixItems = (node.prefixItems as Node[]).map(close);
  for (const k of MAP) {
    if (isNode(node[k])) out[k] = Object.fromEntries(Object.entries(node[k]).map(([name, s]) => [name, isNode(s) ? close(s) : s]));
  }
  for (const k of ['anyOf', 'oneOf'] as const) {
    const branches = node[k];
    if (!Array.isArray(branches)) continue;
    const open = branches as Node[];
    out[k] = open.map((b, i) => (i === 0 ? close(b) : { allOf: [...open.slice(0, i).map((earlier) => ({ not: earlier })), close(b)] }));
  }
  const type = node.type;
  const object = type === 'object' || (Array.isArray(type) && type.includes('object'));
  if (object && !('additionalProperties' in node) && !('unevaluatedProperties' in node)) out.additionalProperties = false;
  return out;
}
