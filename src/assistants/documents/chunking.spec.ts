import { countTextTokens } from '../../providers/tokens';
import { chunkText, DEFAULT_CHUNKING, normalizeText, TextChunk, textOfChunks } from './chunking';

const WORDS = (
  'river stone lantern harbor orchard meadow copper violet engine ledger falcon summit canvas ' +
  'thunder marble willow beacon garden pepper silver anchor quartz saddle timber walnut crystal ' +
  'the a of and to in is was for on with as by at from'
).split(' ');

/** Deterministic pseudo-random prose: sentences of 6-24 words, paragraphs of `sentences` sentences. */
function prose(paragraphs: number, sentences: number, seed = 7): string {
  let state = seed;
  const next = () => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const sentence = () => {
    const words = Array.from({ length: 6 + Math.floor(next() * 19) }, () => WORDS[Math.floor(next() * WORDS.length)]);
    const text = words.join(' ');
    return `${text[0].toUpperCase()}${text.slice(1)}${next() < 0.15 ? '?' : '.'}`;
  };
  return Array.from({ length: paragraphs }, () => Array.from({ length: sentences }, sentence).join(' ')).join('\n\n');
}

const collapse = (text: string) => text.replace(/\s+/g, ' ').trim();

/** Every chunk is a piece of the text, in order, each overlapping or touching the one before, covering all of it. */
function expectContiguousCover(text: string, chunks: TextChunk[]): void {
  const flat = collapse(text);
  let previousStart = -1;
  let previousEnd = 0;
  for (const chunk of chunks) {
    const piece = collapse(chunk.content);
    const start = flat.indexOf(piece, previousStart + 1);
    expect(start).toBeGreaterThan(previousStart);
    expect(start).toBeLessThanOrEqual(previousEnd + 1);
    previousStart = start;
    previousEnd = start + piece.length;
  }
  expect(previousEnd).toBe(flat.length);
}

/** Tokens of the longest start of `next` that is also the end of `previous`, cut at a space. */
function overlapTokens(previous: string, next: string): number {
  const a = collapse(previous);
  const b = collapse(next);
  for (let length = Math.min(a.length, b.length); length > 0; length--) {
    if ((length === b.length || b[length] === ' ') && a.endsWith(b.slice(0, length))) return countTextTokens(b.slice(0, length));
  }
  return 0;
}

describe('normalizeText', () => {
  it('unifies line ends, spaces and blank lines, and drops control and zero-width characters', () => {
    expect(normalizeText('  Title\r\n\r\n\r\n\r\nOne\t two\u00a0 three \n  four\u200b\u0007\fFive\u00ad  ')).toBe(
      'Title\n\nOne two three\nfour\n\nFive',
    );
  });

  it('composes Unicode (NFC), so the same word is stored one way', () => {
    expect(normalizeText('cafe\u0301')).toBe('caf\u00e9');
  });
});

describe('chunkText', () => {
  it('gives nothing for no text, and one chunk for a short text', () => {
    expect(chunkText('')).toEqual([]);
    expect(chunkText('One short paragraph.\n\nAnd another one.')).toEqual([
      { content: 'One short paragraph.\n\nAnd another one.', tokens: countTextTokens('One short paragraph.\n\nAnd another one.') },
    ]);
  });

  it('makes chunks of at most maxTokens, most of them near it, with the exact count stored', () => {
    const text = prose(40, 9);
    const chunks = chunkText(text);
    expect(chunks.length).toBeGreaterThan(10);
    for (const chunk of chunks) {
      expect(chunk.tokens).toBe(countTextTokens(chunk.content));
      expect(chunk.tokens).toBeLessThanOrEqual(DEFAULT_CHUNKING.maxTokens);
    }
    // All but the last are at least half full (the paragraph rule closes them no earlier).
    for (const chunk of chunks.slice(0, -1)) expect(chunk.tokens).toBeGreaterThanOrEqual(DEFAULT_CHUNKING.maxTokens / 2);
    const mean = chunks.reduce((sum, chunk) => sum + chunk.tokens, 0) / chunks.length;
    expect(mean).toBeGreaterThan(300);
    expectContiguousCover(text, chunks);
  });

  it('ends chunks at sentence ends and starts each with up to overlapTokens of the one before', () => {
    const chunks = chunkText(prose(30, 12, 11));
    for (const chunk of chunks) expect(chunk.content).toMatch(/[.?]$/);
    for (let i = 1; i < chunks.length; i++) {
      const overlap = overlapTokens(chunks[i - 1].content, chunks[i].content);
      expect(overlap).toBeGreaterThan(0);
      expect(overlap).toBeLessThanOrEqual(DEFAULT_CHUNKING.overlapTokens + 1);
    }
  });

  it('keeps paragraphs whole when they fit, closing a chunk at a paragraph end', () => {
    // Paragraphs of ~120-170 tokens: two fit in a chunk, three do not.
    const text = prose(12, 6, 3);
    const paragraphs = text.split('\n\n');
    const chunks = chunkText(text, { maxTokens: 400, overlapTokens: 0 });
    for (const chunk of chunks) {
      for (const part of chunk.content.split('\n\n')) expect(paragraphs).toContain(part);
    }
    expect(chunks.map((chunk) => chunk.content).join('\n\n')).toBe(text);
  });

  it('cuts a sentence longer than a chunk between words, and a single huge word between characters', () => {
    // Not periodic, so that each chunk is found at exactly one place in the text.
    const long = `${prose(1, 60).replace(/[.?]/g, '')}.`;
    const blob = Buffer.from(Array.from({ length: 3600 }, (_, i) => (i * 7919 + (i >> 3) * 104729) % 251)).toString('base64');
    for (const text of [long, blob, `${long}\n\n${blob}`]) {
      const chunks = chunkText(text);
      expect(chunks.length).toBeGreaterThan(1);
      for (const chunk of chunks) expect(chunk.tokens).toBeLessThanOrEqual(DEFAULT_CHUNKING.maxTokens);
      // Cut at the limit, not in halves: in one paragraph, every chunk but the last is nearly full.
      if (text !== `${long}\n\n${blob}`) {
        for (const chunk of chunks.slice(0, -1)) expect(chunk.tokens).toBeGreaterThan(DEFAULT_CHUNKING.maxTokens * 0.8);
      }
      expectContiguousCover(text, chunks);
    }
  });

  it('keeps line breaks inside a paragraph (lists)', () => {
    const list = '- first item\n- second item\n- third item';
    expect(chunkText(list)[0].content).toBe(list);
  });

  it('honours other sizes', () => {
    const chunks = chunkText(prose(10, 8), { maxTokens: 100, overlapTokens: 20 });
    for (const chunk of chunks) expect(chunk.tokens).toBeLessThanOrEqual(100);
    for (let i = 1; i < chunks.length; i++) expect(overlapTokens(chunks[i - 1].content, chunks[i].content)).toBeLessThanOrEqual(21);
  });

  it('refuses nonsense options', () => {
    expect(() => chunkText('x', { maxTokens: 5, overlapTokens: 0 })).toThrow(/maxTokens/);
    expect(() => chunkText('x', { maxTokens: 100, overlapTokens: 80 })).toThrow(/overlapTokens/);
  });
});

describe('textOfChunks', () => {
  const paragraphs = Array.from({ length: 40 }, (_, p) =>
    Array.from({ length: 6 }, (_, s) => `Paragraph ${p} says thing ${s} about the ${['river', 'engine', 'garden'][s % 3]} of the town.`).join(' '),
  );
  const text = normalizeText(paragraphs.join('\n\n'));

  it.each([
    [{ maxTokens: 400, overlapTokens: 60 }],
    [{ maxTokens: 150, overlapTokens: 75 }],
    [{ maxTokens: 800, overlapTokens: 400 }],
    [{ maxTokens: 200, overlapTokens: 0 }],
  ])('gives back the text that was split with %j, without the overlaps', (options) => {
    const chunks = chunkText(text, options);
    expect(chunks.length).toBeGreaterThan(1);
    expect(textOfChunks(chunks.map((chunk) => chunk.content), options.overlapTokens)).toBe(text);
  });

  it('so re-chunking with other settings gives what chunking the text would', () => {
    const stored = chunkText(text, DEFAULT_CHUNKING).map((chunk) => chunk.content);
    const settings = { maxTokens: 800, overlapTokens: 400 };
    expect(chunkText(textOfChunks(stored, DEFAULT_CHUNKING.overlapTokens), settings)).toEqual(chunkText(text, settings));
  });

  it('joins chunks that do not overlap as paragraphs', () => {
    expect(textOfChunks(['First part.', 'Second part.'], 60)).toBe('First part.\n\nSecond part.');
    expect(textOfChunks([], 60)).toBe('');
  });

  it('takes no more than the overlap from a text that repeats itself', () => {
    const repeated = normalizeText(Array.from({ length: 40 }, () => 'The same sentence again, word for word, as a form letter has it.').join(' '));
    for (const options of [{ maxTokens: 200, overlapTokens: 30 }, { maxTokens: 300, overlapTokens: 0 }]) {
      const chunks = chunkText(repeated, options).map((chunk) => chunk.content);
      expect(chunks.length).toBeGreaterThan(2);
      expect(textOfChunks(chunks, options.overlapTokens).replace(/\s+/g, ' ')).toBe(repeated);
    }
  });
});
