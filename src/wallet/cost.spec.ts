import { ceilMillicents, llmCost, promptCeiling, toDecimalString, toMillicentsNumber } from './cost';

describe('cost', () => {
  const gpt4o = { inputPrice: 250_000, outputPrice: 1_000_000, cachedInputPrice: 125_000 };

  it('prices input, cached input and output tokens exactly', () => {
    // 1000 input (200 cached), 50 output: 800 x 250000 + 200 x 125000 + 50 x 1000000 micro-millicents
    expect(llmCost(gpt4o, { inputTokens: 1000, cachedTokens: 200, outputTokens: 50 })).toBe(275_000_000n);
    expect(toDecimalString(275_000_000n)).toBe('275.000000');
    expect(llmCost(gpt4o, { inputTokens: 3, cachedTokens: 0, outputTokens: 1 })).toBe(1_750_000n);
  });

  it('keeps fractions of a millicent', () => {
    const mini = { inputPrice: 15_000, outputPrice: 60_000, cachedInputPrice: 7_500 };
    const micros = llmCost(mini, { inputTokens: 7, cachedTokens: 0, outputTokens: 3 });
    expect(micros).toBe(285_000n);
    expect(toDecimalString(micros)).toBe('0.285000');
    expect(toMillicentsNumber(micros)).toBe(0.285);
    expect(ceilMillicents(micros)).toBe(1);
    expect(ceilMillicents(2_000_000n)).toBe(2);
  });

  it('never counts more cached tokens than input tokens', () => {
    expect(llmCost(gpt4o, { inputTokens: 10, cachedTokens: 50, outputTokens: 0 })).toBe(1_250_000n);
  });

  it("prices cache writes at the cache-write price, within the input tokens", () => {
    const haiku = { inputPrice: 100_000, outputPrice: 500_000, cachedInputPrice: 10_000, cacheWritePrice: 125_000 };
    // 1250 input: 1000 read from the cache, 200 written to it, 50 plain; 10 output.
    expect(llmCost(haiku, { inputTokens: 1250, cachedTokens: 1000, cacheWriteTokens: 200, outputTokens: 10 })).toBe(
      50n * 100_000n + 1000n * 10_000n + 200n * 125_000n + 10n * 500_000n,
    );
    // Never more writes than the input left after the reads; no price: input's.
    expect(llmCost(haiku, { inputTokens: 100, cachedTokens: 90, cacheWriteTokens: 50, outputTokens: 0 })).toBe(90n * 10_000n + 10n * 125_000n);
    expect(llmCost(gpt4o, { inputTokens: 100, cachedTokens: 0, cacheWriteTokens: 100, outputTokens: 0 })).toBe(100n * 250_000n);
  });

  it('holds a prompt at the dearer of input and cache write', () => {
    const haiku = { inputPrice: 100_000, outputPrice: 500_000, cachedInputPrice: 10_000, cacheWritePrice: 125_000 };
    expect(promptCeiling(haiku).inputPrice).toBe(125_000);
    expect(promptCeiling(gpt4o)).toBe(gpt4o);
  });
});
