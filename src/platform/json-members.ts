/**
 * Whether a JSON text names a member twice in one object. JSON.parse keeps the last of them
 * silently, while another reader (a proxy, a signer, a log) may keep the first: a body with two
 * `amount`s would then be checked with one amount and paid with the other. I-JSON (RFC 7493)
 * forbids duplicate names; so does this service.
 *
 * `text` must be the valid JSON that parsed to `value`. Every member name in the text adds a
 * property to its object or overwrites one, so the text names more members than the parsed value
 * holds exactly when a name repeats. Both counts are one linear pass, with no recursion (a body
 * may nest thousands of levels deep).
 */
export function repeatsMemberName(text: string, value: unknown): boolean {
  return memberNamesInText(text) !== membersInValue(value);
}

const BACKSLASH = 92;
const COLON = 58;

function memberNamesInText(text: string): number {
  let names = 0;
  // `open` is a string's opening quote; its closing quote is the next one not escaped (preceded
  // by an even number of backslashes). indexOf skips the long strings (addresses) natively.
  for (let open = text.indexOf('"'); open !== -1; ) {
    let close = text.indexOf('"', open + 1);
    while (close !== -1 && escaped(text, close)) close = text.indexOf('"', close + 1);
    if (close === -1) break;
    // A string followed by a colon (after white space) is a member name.
    let next = close + 1;
    while (next < text.length && isJsonSpace(text.charCodeAt(next))) next++;
    if (text.charCodeAt(next) === COLON) names++;
    open = text.indexOf('"', close + 1);
  }
  return names;
}

function escaped(text: string, quote: number): boolean {
  let backslashes = 0;
  for (let i = quote - 1; text.charCodeAt(i) === BACKSLASH; i--) backslashes++;
  return backslashes % 2 === 1;
}

const isJsonSpace = (c: number) => c === 32 || c === 10 || c === 13 || c === 9;

function membersInValue(value: unknown): number {
  let members = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const v = pending.pop();
    if (typeof v !== 'object' || v === null) continue;
    if (Array.isArray(v)) {
      for (const item of v) if (typeof item === 'object' && item !== null) pending.push(item);
      continue;
    }
    for (const key in v) {
      members++;
      const item = (v as Record<string, unknown>)[key];
      if (typeof item === 'object' && item !== null) pending.push(item);
    }
  }
  return members;
}

/**
 * The first number in a JSON text written with a fraction or an exponent (`1.0`, `1e2`,
 * `0.99999999999999999`), or undefined. Every number a request body of this service holds is a
 * whole number (amounts are decimal strings), and JSON.parse turns such a spelling into an
 * integer without a trace: `0.99999999999999999` would pass a minimum of 1 as 1. Like
 * integersInDigits for query strings, the text itself is checked. `text` must be valid JSON.
 */
export function numberWithFraction(text: string): string | undefined {
  // Outside strings a valid JSON text holds only structure, white space, literals and numbers: a
  // '.' belongs to a number, and so does an 'e' or 'E' after a digit (in true and false it follows a letter).
  let from = 0;
  for (;;) {
    const open = text.indexOf('"', from);
    const end = open === -1 ? text.length : open;
    for (let i = from; i < end; i++) {
      const c = text.charCodeAt(i);
      if (c === DOT || ((c === LOWER_E || c === UPPER_E) && isDigit(text.charCodeAt(i - 1)))) return numberAround(text, i);
    }
    if (open === -1) return undefined;
    let close = text.indexOf('"', open + 1);
    while (close !== -1 && escaped(text, close)) close = text.indexOf('"', close + 1);
    if (close === -1) return undefined;
    from = close + 1;
  }
}

const DOT = 46;
const LOWER_E = 101;
const UPPER_E = 69;
const isDigit = (c: number) => c >= 48 && c <= 57;
const NUMBER_CHAR = /[-+0-9.eE]/;

function numberAround(text: string, i: number): string {
  let start = i;
  while (start > 0 && NUMBER_CHAR.test(text[start - 1]!)) start--;
  let end = i;
  while (end < text.length && NUMBER_CHAR.test(text[end]!)) end++;
  const token = text.slice(start, end);
  return token.length > 40 ? `${token.slice(0, 40)}…` : token;
}
