import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/cli.js';

/**
 * `paywarden receipt verify` run on `answer` saved to a file, as a user would after saving an
 * answer of the API, with the JWKS from a file or a URL; its exit code and what it printed.
 */
export async function verifyReceiptWithCli(answer: unknown, jwks: unknown | string): Promise<{ code: number; out: string; err: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'pw-receipt-'));
  try {
    const file = join(dir, 'answer.json');
    await writeFile(file, JSON.stringify(answer));
    let jwksArg = jwks as string;
    if (typeof jwks !== 'string') {
      jwksArg = join(dir, 'jwks.json');
      await writeFile(jwksArg, JSON.stringify(jwks));
    }
    const out: string[] = [];
    const err: string[] = [];
    const code = await run(['receipt', 'verify', file, '--jwks', jwksArg], { log: (s) => out.push(s), error: (s) => err.push(s) }, {});
    return { code, out: out.join('\n'), err: err.join('\n') };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
