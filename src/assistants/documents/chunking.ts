import { countTextTokens } from '../../providers/tokens';

export interface ChunkingOptions {
  /** No chunk is longer than this (o200k tokens, as `countTextTokens` counts). */
  maxTokens: number;
  /** About this many tokens at the end of a chunk start the next one too. */
  overlapTokens: number;
}

/**
 * ~400 tokens: a passage long enough to answer from, and five of them (file_search's default
 * results) stay near 2,000 tokens of the model's context. The overlap keeps a sentence cut
 * by a chunk boundary readable from either side.
 */
export const DEFAULT_CHUNKING: Readonly<ChunkingOptions> = { maxTokens: 400, overlapTokens: 60 };

/**
 * An assistant's chunking, as OpenAI's file_search has it: 800 tokens with 400 of overlap by
 * default, a size from 100 to 4,096 tokens, an overlap of at most half the size. Documents
 * split before it was a setting (their `chunk_max_tokens` is null) used DEFAULT_CHUNKING.
 */
export const ASSISTANT_CHUNKING: Readonly<ChunkingOptions> = { maxTokens: 800, overlapTokens: 400 };
export const MIN_CHUNK_TOKENS = 100;
export const MAX_CHUNK_TOKENS = 4096;

/** What is wrong with a chunk size and overlap, naming the field (`chunk_max_tokens`, `chunk_overlap_tokens`); null when nothing. */
export function chunkingProblem(options: ChunkingOptions): { param: string; message: string } | null {
  const { maxTokens, overlapTokens } = options;
  if (!Number.isInteger(maxTokens) || maxTokens < MIN_CHUNK_TOKENS || maxTokens > MAX_CHUNK_TOKENS) {
    return { param: 'chunk_max_tokens', message: `chunk_max_tokens must be a whole number from ${MIN_CHUNK_TOKENS} to ${MAX_CHUNK_TOKENS}.` };
  }
  if (!Number.isInteger(overlapTokens) || overlapTokens < 0 || overlapTokens * 2 > maxTokens) {
    return {
      param: 'chunk_overlap_tokens',
      message: `chunk_overlap_tokens must be a whole number from 0 to half of chunk_max_tokens (${Math.floor(maxTokens / 2)}).`,
    };
  }
  return null;
}

/** A chunk that is at least this full ends at a paragraph's end rather than in the paragraph. */
const MIN_FILL_BEFORE_PARAGRAPH_BREAK = 0.5;
/** Within this many tokens of the limit, a candidate chunk is counted exactly rather than estimated. */
const EXACT_COUNT_MARGIN = 16;

export interface TextChunk {
  content: string;
  tokens: number;
}

/**
 * One text for every format: Unicode NFC, no control or zero-width characters, single
 * spaces, no spaces around line breaks, paragraphs separated by exactly one blank line.
 */
export function normalizeText(raw: string): string {
  return raw
    .normalize('NFC')
    .replace(/\r\n?/g, '\n')
    .replace(/\f/g, '\n\n')
    .replace(/[\u200B-\u200D\u2060\uFEFF\u00AD]/g, '')
    .replace(/[\u0000-\u0008\u000B\u000E-\u001F\u007F]/g, '')
    .replace(/[\t\u00A0\u1680\u2000-\u200A\u202F\u205F\u3000]/g, ' ')
    .replace(/[\u2028\u2029]/g, '\n')
    .replace(/ {2,}/g, ' ')
    .replace(/ *\n */g, '\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

/** A sentence (or part of a long one): the unit chunks are made of. */
interface Piece {
  text: string;
  tokens: number;
  paragraph: number;
  /** What joins it to the piece before it in the same paragraph: a space, or a line break. */
  separator: ' ' | '\n';
}

/**
 * Splits normalised text into chunks of at most `maxTokens` tokens that end at sentence
 * ends, and at paragraph ends when that does not leave a chunk less than half full. Each
 * chunk after the first starts with the last sentences (up to `overlapTokens`) of the one
 * before, or the last words of its last sentence when that sentence alone is longer.
 * A sentence longer than a chunk is cut between words (or, for a "word" longer than a
 * chunk, between characters).
 */
export function chunkText(text: string, options: ChunkingOptions = DEFAULT_CHUNKING): TextChunk[] {
  if (!Number.isInteger(options.maxTokens) || options.maxTokens < 16) throw new Error('maxTokens must be an integer >= 16');
  if (!Number.isInteger(options.overlapTokens) || options.overlapTokens < 0 || options.overlapTokens > options.maxTokens / 2) {
    throw new Error('overlapTokens must be an integer from 0 to maxTokens / 2');
  }
  const chunker = new Chunker(options);
  const paragraphs = text
    .split(/\n{2,}/)
    .map((paragraph) => paragraph.trim())
    .filter(Boolean);
  // A Markdown heading goes with the paragraph under it, never alone at the end of a chunk.
  let headings: Piece[] = [];
  paragraphs.forEach((paragraph, index) => {
    const pieces = sentencePieces(paragraph, index, options.maxTokens);
    if (MARKDOWN_HEADING.test(paragraph) && index < paragraphs.length - 1) {
      headings.push(...pieces);
    } else {
      chunker.addParagraph([...headings, ...pieces]);
      headings = [];
    }
  });
  return chunker.finish();
}

const MARKDOWN_HEADING = /^#{1,6}[ \t][^\n]*$/;

const sentences = new Intl.Segmenter('en', { granularity: 'sentence' });

function sentencePieces(paragraph: string, index: number, maxTokens: number): Piece[] {
  const pieces: Piece[] = [];
  let separator: Piece['separator'] = ' ';
  for (const { segment } of sentences.segment(paragraph)) {
    const sentence = segment.trim();
    if (sentence) {
      for (const part of splitToFit(sentence, maxTokens)) {
        pieces.push({ text: part.text, tokens: part.tokens, paragraph: index, separator });
        separator = ' ';
      }
    }
    // A line break inside a paragraph (a list, a poem, an address) is kept.
    if (/\n\s*$/.test(segment)) separator = '\n';
  }
  return pieces;
}

/**
 * A sentence too long for a chunk, cut into the longest runs of words that fit (found by
 * bisection, counting exactly); a single word too long for a chunk is cut between characters.
 */
function splitToFit(text: string, maxTokens: number): Array<{ text: string; tokens: number }> {
  const tokens = countTextTokens(text);
  if (tokens <= maxTokens) return [{ text, tokens }];
  const parts: Array<{ text: string; tokens: number }> = [];
  const words = text.match(/\S+\s*/g) ?? [text];
  for (let start = 0; start < words.length; ) {
    const end = longestFit(words, start, maxTokens);
    if (end > start) {
      const part = words.slice(start, end).join('').trim();
      parts.push({ text: part, tokens: countTextTokens(part) });
      start = end;
      continue;
    }
    const characters = Array.from(words[start].trim());
    for (let from = 0; from < characters.length; ) {
      const to = Math.max(from + 1, longestFit(characters, from, maxTokens));
      const part = characters.slice(from, to).join('');
      parts.push({ text: part, tokens: countTextTokens(part) });
      from = to;
    }
    start++;
  }
  return parts;
}

/** The largest `end` such that `units[start..end)` joined has at most `maxTokens` tokens (`start` if none). */
function longestFit(units: string[], start: number, maxTokens: number): number {
  let low = start;
  let high = Math.min(units.length, start + maxTokens * 8);
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (countTextTokens(units.slice(start, middle).join('').trim()) <= maxTokens) low = middle;
    else high = middle - 1;
  }
  return low;
}

function render(pieces: Piece[]): string {
  let text = '';
  pieces.forEach((piece, i) => {
    if (i > 0) text += piece.paragraph !== pieces[i - 1].paragraph ? '\n\n' : piece.separator;
    text += piece.text;
  });
  return text;
}

/** Tokens a separator adds, as estimated: a space merges into the next word, a line break may not. */
function separatorCost(previous: Piece | undefined, piece: Piece): number {
  if (!previous) return 0;
  return previous.paragraph !== piece.paragraph || piece.separator === '\n' ? 1 : 0;
}

class Chunker {
  private readonly chunks: TextChunk[] = [];
  private current: Piece[] = [];
  /** Estimated (sum of the pieces and separators), made exact whenever it is counted. */
  private currentTokens = 0;
  /** Pieces of `current` that are not the overlap from the chunk before. */
  private fresh = 0;
  private freshTokens = 0;

  constructor(private readonly options: ChunkingOptions) {}

  addParagraph(pieces: Piece[]): void {
    if (pieces.length === 0) return;
    const paragraphTokens = pieces.reduce((sum, piece, i) => sum + piece.tokens + separatorCost(pieces[i - 1], piece), 0);
    const joinCost = separatorCost(this.current[this.current.length - 1], pieces[0]);
    const fitsWhole = this.currentTokens + joinCost + paragraphTokens <= this.options.maxTokens;
    if (!fitsWhole && this.freshTokens >= this.options.maxTokens * MIN_FILL_BEFORE_PARAGRAPH_BREAK) this.flush();
    for (const piece of pieces) this.append(piece);
  }

  finish(): TextChunk[] {
    this.flush();
    return this.chunks;
  }

  private append(piece: Piece): void {
    if (!this.fits(piece)) {
      if (this.fresh > 0) this.flush();
      // The overlap and this piece together are too long: less overlap.
      while (this.current.length > 0 && !this.fits(piece)) this.dropFirst();
    }
    this.currentTokens += separatorCost(this.current[this.current.length - 1], piece) + piece.tokens;
    this.current.push(piece);
    this.fresh++;
    this.freshTokens += piece.tokens;
  }

  private fits(piece: Piece): boolean {
    if (this.current.length === 0) return true;
    const estimate = this.currentTokens + separatorCost(this.current[this.current.length - 1], piece) + piece.tokens;
    if (estimate > this.options.maxTokens) return false;
    if (estimate <= this.options.maxTokens - EXACT_COUNT_MARGIN) return true;
    this.currentTokens = countTextTokens(render(this.current));
    return countTextTokens(render([...this.current, piece])) <= this.options.maxTokens;
  }

  private dropFirst(): void {
    this.current.shift();
    this.currentTokens = countTextTokens(render(this.current));
  }

  private flush(): void {
    if (this.fresh === 0) return;
    let content = render(this.current);
    let tokens = countTextTokens(content);
    // The estimate was short by more than the margin: the last pieces move to the next chunk.
    const carried: Piece[] = [];
    while (tokens > this.options.maxTokens && this.fresh > 1) {
      carried.unshift(this.current.pop()!);
      this.fresh--;
      content = render(this.current);
      tokens = countTextTokens(content);
    }
    while (tokens > this.options.maxTokens && this.current.length > this.fresh) {
      this.current.shift();
      content = render(this.current);
      tokens = countTextTokens(content);
    }
    this.chunks.push({ content, tokens });

    this.current = this.overlap(this.current);
    this.currentTokens = this.current.length ? countTextTokens(render(this.current)) : 0;
    this.fresh = 0;
    this.freshTokens = 0;
    for (const piece of carried) this.append(piece);
  }

  /** The last whole pieces within `overlapTokens`, or else the last words of the last piece. */
  private overlap(pieces: Piece[]): Piece[] {
    const budget = this.options.overlapTokens;
    if (budget === 0 || pieces.length === 0) return [];
    const tail: Piece[] = [];
    let tokens = 0;
    // Never the whole chunk: the next one must not simply contain it.
    for (let i = pieces.length - 1; i >= 1; i--) {
      const cost = pieces[i].tokens + separatorCost(pieces[i - 1], pieces[i]);
      if (tokens + cost > budget) break;
      tail.unshift(pieces[i]);
      tokens += cost;
    }
    if (tail.length > 0) return tail;

    const last = pieces[pieces.length - 1];
    const words = last.text.match(/\S+\s*/g) ?? [];
    let text = '';
    let count = 0;
    for (let i = words.length - 1; i >= 1; i--) {
      const candidate = words[i] + text;
      const candidateTokens = countTextTokens(candidate.trim());
      if (candidateTokens > budget) break;
      text = candidate;
      count = candidateTokens;
    }
    text = text.trim();
    return text ? [{ text, tokens: count, paragraph: last.paragraph, separator: last.separator }] : [];
  }
}

/**
 * A document's text again from its chunks, for re-chunking (the uploaded file is not kept):
 * each chunk starts with the end of the one before (the overlap), which is dropped; chunks
 * that do not overlap are joined as paragraphs. The overlap is the longest start of the next
 * chunk that ends the text so far, cut between words on both sides, within the overlap the
 * chunks were made with (`overlapTokens`: in a text that repeats itself a longer match is
 * not the overlap).
 */
export function textOfChunks(chunks: readonly string[], overlapTokens: number): string {
  let text = '';
  for (const chunk of chunks) {
    if (!text) {
      text = chunk;
      continue;
    }
    const overlap = overlapLength(text, chunk, overlapTokens);
    text += overlap > 0 ? chunk.slice(overlap) : `\n\n${chunk}`;
  }
  return text;
}


function overlapLength(text: string, next: string, overlapTokens: number): number {
  // Never the whole chunk: each chunk has something new.
  for (let length = Math.min(text.length, next.length - 1); length > 0; length--) {
    const endsAWord = /\s/.test(next[length]);
    const startsAWord = length === text.length || /\s/.test(text[text.length - length - 1]);
    if (!endsAWord || !startsAWord || !text.endsWith(next.slice(0, length))) continue;
    if (countTextTokens(next.slice(0, length)) <= overlapTokens) return length;
  }
  return 0;
}
