// Compiles the zoo's Solidity sources with solc-js, once: the output is cached under
// node_modules/.cache/paywarden-zoo/<hash>.json, keyed by the sources, the compiler version and
// the settings, so tests and `npm run devnet` load JSON instead of starting the compiler (the
// compiler itself is only loaded on a cache miss).
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Abi, Hex } from 'viem';

export const ZOO_CONTRACTS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'contracts');

const requireHere = createRequire(import.meta.url);

const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  // Base runs Cancun (and later) opcodes; pinning keeps the bytecode independent of solc's default.
  evmVersion: 'cancun',
  outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
} as const;

export interface CompiledContract {
  abi: Abi;
  bytecode: Hex;
  deployedBytecode: Hex;
}

export type ZooArtifacts = Record<string, CompiledContract>;

interface SolcOutput {
  errors?: Array<{ severity: string; formattedMessage: string }>;
  contracts?: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string }; deployedBytecode: { object: string } } }>>;
}

function solcVersion(): string {
  return (requireHere('solc/package.json') as { version: string }).version;
}

function readSources(dir: string): Record<string, { content: string }> {
  const sources: Record<string, { content: string }> = {};
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.sol')).sort()) {
    sources[file] = { content: readFileSync(join(dir, file), 'utf8') };
  }
  return sources;
}

function cacheDir(): string {
  // The project's node_modules (gitignored), found from solc's own location.
  const solcDir = dirname(requireHere.resolve('solc/package.json'));
  return join(dirname(solcDir), '.cache', 'paywarden-zoo');
}

/** The compiler input and its cache key (a hash of that input and the compiler version). */
function zooInput(dir: string) {
  const input = { language: 'Solidity', sources: readSources(dir), settings: SETTINGS };
  const hash = createHash('sha256').update(solcVersion()).update(JSON.stringify(input)).digest('hex').slice(0, 32);
  return { input, hash };
}

export function zooSourceHash(dir = ZOO_CONTRACTS_DIR): string {
  return zooInput(dir).hash;
}

/** Contract name -> ABI and bytecode, compiled at most once per source hash. */
export function compileZoo(dir = ZOO_CONTRACTS_DIR): ZooArtifacts {
  const { input, hash } = zooInput(dir);
  const file = join(cacheDir(), `${hash}.json`);
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as ZooArtifacts;
  } catch {
    // Cache miss (or a damaged file): compile below.
  }

  const solc = requireHere('solc') as { compile(input: string): string };
  const output = JSON.parse(solc.compile(JSON.stringify(input))) as SolcOutput;
  const errors = (output.errors ?? []).filter((e) => e.severity === 'error');
  if (errors.length) throw new Error(`zoo contracts do not compile:\n${errors.map((e) => e.formattedMessage).join('\n')}`);

  const artifacts: ZooArtifacts = {};
  for (const byName of Object.values(output.contracts ?? {})) {
    for (const [name, c] of Object.entries(byName)) {
      if (!c.evm.bytecode.object) continue; // abstract contracts
      artifacts[name] = { abi: c.abi, bytecode: `0x${c.evm.bytecode.object}`, deployedBytecode: `0x${c.evm.deployedBytecode.object}` };
    }
  }
  // Write then rename, so a concurrent reader never sees half a file.
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(artifacts));
  renameSync(tmp, file);
  return artifacts;
}
