import fc from 'fast-check';
import { countTokens } from 'gpt-tokenizer';
import type { ChatMessage } from './provider-adapter';
import { countPromptTokens, countPromptTokensAsync, countTextTokens, countTextTokensAsync, PLAIN_TEXT } from './tokens';
import { randomWords } from '../../test/support/random-words';

/** Words of every kind the pre-tokenizer tells apart, none near the length where counting cuts pieces. */
const WORD = fc.oneof(
  fc.stringMatching(/^[a-zA-Z]{1,12}$/),
  fc.stringMatching(/^[0-9]{1,7}$/),
  fc.constantFrom(' ', '  ', '\n', '\n\n', '\t', ' \n ', '. ', ', ', "'s", "'LL", '://', '/', '==', '!?', '—', '...'),
  fc.constantFrom('héllo', 'Straße', '日本語', '中文字', 'привет', 'مرحبا', '🙂', '👍🏽', 'ﬁ', 'e\u0301'),
);
const TEXT = fc.array(WORD, { maxLength: 2_000 }).map((words) => words.join(''));

describe('countTextTokens', () => {
  it('counts exactly as the o200k tokenizer does, whatever the mix of words', () => {
    fc.assert(
      fc.property(TEXT, (text) => {
        expect(countTextTokens(text)).toBe(countTokens(text, PLAIN_TEXT));
      }),
      { numRuns: 300 },
    );
  });

  it('counts a long text, cut into runs, exactly as in one piece', async () => {
    const text = randomWords(60_000, 7);
    const exact = countTokens(text, PLAIN_TEXT);
    expect(countTextTokens(text)).toBe(exact);
    const other = randomWords(60_000, 8);
    expect(await countTextTokensAsync(other)).toBe(countTokens(other, PLAIN_TEXT));
  });

  it('counts text that looks like a special token as plain text instead of throwing', () => {
    expect(() => countTokens('<|endoftext|>')).toThrow();
    expect(countTextTokens('Say <|endoftext|> and <|fim_prefix|>.')).toBe(
      countTokens('Say <|endoftext|> and <|fim_prefix|>.', { disallowedSpecial: new Set() }),
    );
    expect(countTextTokens('<|endoftext|>'.repeat(1_000))).toBeGreaterThan(1_000);
  });

  it('counts a word too long to merge in one piece in slices, within a token of each slice', () => {
    // 20,000 letters without a space: merged whole, this is quadratic (80,000 took 7 s).
    let word = '';
    for (let i = 0; word.length < 20_000; i++) word += String.fromCharCode(97 + ((i * 7919) % 26));
    const exact = countTokens(word, PLAIN_TEXT);
    const counted = countTextTokens(word);
    expect(Math.abs(counted - exact)).toBeLessThanOrEqual(Math.ceil(word.length / 256));
  });
});

describe('countPromptTokensAsync', () => {
  const prompt: ChatMessage[] = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: [{ type: 'text', text: randomWords(20_000, 3) }, { type: 'image_url', image_url: { url: 'https://x/y.png', detail: 'low' } }] },
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
    { role: 'tool', tool_call_id: 'c1', content: 'done' },
  ];

  it('counts what countPromptTokens counts', async () => {
    const tools = [{ type: 'function' as const, function: { name: 'f', parameters: { type: 'object' } } }];
    expect(await countPromptTokensAsync(prompt, tools)).toBe(countPromptTokens(prompt, tools));
  });

  it('stops soon after the limit and says the prompt is above it', async () => {
    const huge: ChatMessage[] = [{ role: 'user', content: randomWords(400_000, 11) }];
    const counted = await countPromptTokensAsync(huge, [], { limit: 1_000 });
    expect(counted).toBeGreaterThan(1_000);
    // Runs of about 2,048 characters: the count stops within one run of the limit.
    expect(counted).toBeLessThan(3_000);
    // A count cut short is not remembered as the text's count.
    expect(await countPromptTokensAsync(huge)).toBe(countTokens(huge[0].content as string, PLAIN_TEXT) + 4 + 3);
  });

  it('never refuses a prompt that fits: the cheap lower bound stays at or below the count', async () => {
    await fc.assert(
      fc.asyncProperty(TEXT, async (text) => {
        const prompt: ChatMessage[] = [{ role: 'user', content: text }];
        // The tokenizer's own count (ours would be remembered, and answer the next counts).
        const exact = countTokens(text, PLAIN_TEXT) + 4 + 3;
        expect(await countPromptTokensAsync(prompt, [], { limit: exact })).toBe(exact);
        expect(await countPromptTokensAsync(prompt, [], { limit: exact - 1 })).toBeGreaterThan(exact - 1);
      }),
      { numRuns: 200 },
    );
  });

  it('gives other work a turn while it counts', async () => {
    let turns = 0;
    const ticker = setInterval(() => turns++, 1);
    try {
      await countPromptTokensAsync([{ role: 'user', content: randomWords(600_000, 5) }]);
    } finally {
      clearInterval(ticker);
    }
    expect(turns).toBeGreaterThan(0);
  });
});
