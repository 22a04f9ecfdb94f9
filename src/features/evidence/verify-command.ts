import { readFile } from 'node:fs/promises';
import { verifyChain, type JwksDocument } from './verify.js';

type Out = { log: (s: string) => void; error: (s: string) => void };

export const VERIFY_USAGE = 'evidence verify <chain.json> --jwks <file|url>';

/** Reads a JWKS from a file or an http(s) URL (e.g. https://<service>/.well-known/jwks.json). */
async function loadJwks(source: string): Promise<JwksDocument> {
  const text = /^https?:\/\//i.test(source)
    ? await fetch(source, { signal: AbortSignal.timeout(10_000) }).then(async (res) => {
        if (!res.ok) throw new Error(`JWKS ${source} answered ${res.status}`);
        return res.text();
      })
    : await readFile(source, 'utf8');
  const doc = JSON.parse(text) as JwksDocument;
  if (!doc || !Array.isArray(doc.keys)) throw new Error('the JWKS has no keys array');
  if (!doc.keys.every((k: unknown) => typeof k === 'object' && k !== null && !Array.isArray(k))) throw new Error('the JWKS lists a key that is not an object');
  return doc;
}

/**
 * `paywarden evidence verify <chain.json> --jwks <file|url>`: prints the verification as JSON;
 * exit code 0 when everything verifies, 1 when anything does not (or cannot be read), 2 on
 * bad usage.
 */
export async function evidenceVerifyCommand(args: string[], out: Out): Promise<number> {
  const at = args.indexOf('--jwks');
  const jwksSource = at >= 0 ? args[at + 1] : undefined;
  const files = args.filter((_, i) => at < 0 || (i !== at && i !== at + 1));
  if (!jwksSource || files.length !== 1 || files[0]!.startsWith('--')) {
    out.error(`usage: paywarden ${VERIFY_USAGE}`);
    return 2;
  }
  let chain: unknown;
  let jwks: JwksDocument;
  try {
    chain = JSON.parse(await readFile(files[0]!, 'utf8'));
    jwks = await loadJwks(jwksSource);
  } catch (err) {
    out.error(`paywarden: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
  const result = verifyChain(chain, jwks);
  out.log(JSON.stringify(result, null, 2));
  if (!result.ok) out.error(`paywarden: evidence chain does NOT verify (${result.problems.length} problem(s))`);
  return result.ok ? 0 : 1;
}
