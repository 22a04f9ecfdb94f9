// The token preview's Base reads, decoded: what a hostile token answers is made safe to show.
import { describe, expect, it } from 'vitest';
import { viemTokenChainReader } from '../../src/features/tokens/chain-reader.js';
import type { ChainClient } from '../../src/platform/chain.js';

const TOKEN = '0x3333333333333333333333333333333333333333';
const answering = (results: unknown[], chainId = 8453) => ({ getChainId: async () => chainId, multicall: async () => results }) as unknown as ChainClient;
const ok = (result: unknown) => ({ status: 'success', result });

describe('token identity read on Base', () => {
  it('drops control, bidi and invisible characters from name and symbol', async () => {
    const reader = viemTokenChainReader(answering([ok('USD\u202E\u200B Coin\u0000'), ok('US\u2066DC\u0085'), ok(6)]));
    expect(await reader.identity(TOKEN)).toEqual({ name: 'USD Coin', symbol: 'USDC', decimals: 6 });
  });

  it('keeps at most 200 characters, never cutting a surrogate pair', async () => {
    const reader = viemTokenChainReader(answering([ok('a'.repeat(199) + '\u{1F600}b'), ok('x'.repeat(500)), ok(18)]));
    const identity = await reader.identity(TOKEN);
    expect(identity.name).toBe('a'.repeat(199) + '\u{1F600}');
    expect(identity.symbol).toBe('x'.repeat(200));
  });

  it('a failed or non-string read is unknown (null); decimals above 255 are unknown too', async () => {
    const reader = viemTokenChainReader(answering([{ status: 'failure', error: new Error('reverted') }, ok(7n), ok(256)]));
    expect(await reader.identity(TOKEN)).toEqual({ name: null, symbol: null, decimals: null });
  });

  it('is refused, whatever it says, when the RPC does not say it serves Base', async () => {
    const reader = viemTokenChainReader(answering([ok('USD Coin'), ok('USDC'), ok(6)], 84532));
    await expect(reader.identity(TOKEN)).rejects.toMatchObject({ code: 'upstream_unavailable', status: 502 });
  });
});
