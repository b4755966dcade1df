import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { countTokens, encode, setMergeCacheSize } from 'gpt-tokenizer';
import { O200K_TOKEN_SPLIT_REGEX } from 'gpt-tokenizer/cjs/encodingParams/constants';
import { imageTokens } from './image-tokens';
import type { ChatMessage, FunctionTool } from './provider-adapter';

/**
 * A file part (a PDF) is not parsed here: OpenAI reads each page as its text plus an image
 * (about 1,500 tokens a page), and a page takes tens of kilobytes, so a file counts as one
 * token per 64 bytes of its decoded data; a file sent by `file_id` (size unknown) as one page.
 */
const FILE_BYTES_PER_TOKEN = 64;
const FILE_ID_TOKENS = 1_500;
/**
 * Audio input is billed by duration, about 10 tokens a second. The duration is estimated from
 * the size: a WAV file's byte rate is read from its header (else 16 kHz mono 16-bit), an MP3 is
 * taken at 64 kbit/s (speech; a higher bitrate is over-estimated, never under).
 */
const AUDIO_TOKENS_PER_SECOND = 10;
const AUDIO_BYTES_PER_SECOND = { wav: 32_000, mp3: 8_000 };
const TOKENS_PER_MESSAGE = 4;
const REPLY_PRIMING_TOKENS = 3;

/**
 * Text that looks like a special token (`<|endoftext|>`) is counted as the plain text it is:
 * the tokenizer's default is to throw, which would make a user's message a 500.
 */
export const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/**
 * Merging a pre-tokenizer piece (a word, a run of punctuation or of spaces) costs the square
 * of its length: 80,000 letters without a space took 7 s. Longer pieces are counted in slices
 * of this many characters (the longest o200k token has 128), off by at most a token a slice.
 */
const MAX_PIECE_CHARS = 256;
/** The longest o200k token: a piece of n characters is at least n / 128 tokens. */
const LONGEST_TOKEN_CHARS = 128;
/** Whole pieces are handed to the tokenizer in runs of about this many characters (a few ms of work at most). */
const RUN_CHARS = 2_048;
/** The asynchronous counts give the event loop a turn after this much work. */
const SLICE_MS = 10;

/**
 * The tokenizer's merge cache holds 100,000 words by default, and its eviction slows down as
 * the cache churns: on random words, each 250 KB took longer than the last (1.6 s, then 10 s
 * by the eighth). A small cache keeps the common words and evicts cheaply.
 */
setMergeCacheSize(4_096);

/**
 * Counts of long texts, so that a prompt counted before the hold is not counted again for the
 * simulator's usage, a conversation's stored messages or a stream cut short. Bounded by the
 * characters it keeps alive; the oldest counts go first.
 */
const MEMO_MIN_CHARS = 4_096;
const MEMO_MAX_CHARS = 16 * 1024 * 1024;
const memo = new Map<string, number>();
let memoChars = 0;

/** Tokens of a text, with the o200k tokenizer. Synchronous: for texts already counted or known to be small. */
export function countTextTokens(text: string): number {
  if (!text) return 0;
  const known = recall(text);
  if (known !== undefined) return known;
  let total = 0;
  for (const part of countableParts(text)) total += countTokens(part, PLAIN_TEXT);
  remember(text, total);
  return total;
}

/**
 * The tokens of a text, in linear time, split as `countTextTokens` counts them (long pieces in
 * slices), so that their number is its count. For the simulator's answers and log-probabilities.
 */
export function encodeText(text: string): number[] {
  const tokens: number[] = [];
  for (const part of countableParts(text)) for (const token of encode(part, PLAIN_TEXT)) tokens.push(token);
  return tokens;
}

/**
 * Prompt tokens of a request, counted with the o200k tokenizer. Exact for OpenAI's current
 * models and an estimate for others: it sizes the wallet hold, while charges use the
 * provider's own counts whenever it reports them. Synchronous: see `countPromptTokensAsync`
 * for a request's own messages, which may be megabytes.
 */
export function countPromptTokens(messages: ChatMessage[], tools: FunctionTool[] = []): number {
  let total = REPLY_PRIMING_TOKENS;
  for (const item of promptItems(messages, tools)) total += typeof item === 'number' ? item : countTextTokens(item);
  return total;
}

/**
 * `countPromptTokens` without holding the event loop: the work is done in slices of about
 * 10 ms, with a turn for other requests in between. With a `limit`, counting stops as soon as
 * the total exceeds it, and the number returned is then only known to be above the limit:
 * a prompt far beyond a model's context costs no more work than one that just fits.
 */
export async function countPromptTokensAsync(
  messages: ChatMessage[],
  tools: FunctionTool[] = [],
  options: { limit?: number } = {},
): Promise<number> {
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  const pacer = new Pacer();
  if (Number.isFinite(limit)) {
    // A cheap lower bound first (one token per piece, no merging, about 10 times faster than
    // counting random words): most prompts beyond the limit never get merged at all.
    const atLeast = await sumPrompt(messages, tools, limit, (text, budget) => minimumTokensPaced(text, budget, pacer));
    if (atLeast > limit) return atLeast;
  }
  return sumPrompt(messages, tools, limit, (text, budget) => countTextTokensPaced(text, budget, pacer));
}

/** `countTextTokens` in slices, as `countPromptTokensAsync` counts. */
export function countTextTokensAsync(text: string): Promise<number> {
  return countTextTokensPaced(text, Number.POSITIVE_INFINITY, new Pacer());
}

async function sumPrompt(
  messages: ChatMessage[],
  tools: FunctionTool[],
  limit: number,
  countText: (text: string, budget: number) => Promise<number>,
): Promise<number> {
  let total = REPLY_PRIMING_TOKENS;
  for (const item of promptItems(messages, tools)) {
    total += typeof item === 'number' ? item : await countText(item, limit - total);
    if (total > limit) break;
  }
  return total;
}

/** What a prompt is made of: fixed amounts of tokens, and texts to count. */
function* promptItems(messages: ChatMessage[], tools: FunctionTool[]): Generator<number | string> {
  for (const message of messages) {
    yield TOKENS_PER_MESSAGE;
    const content = (message as { content?: unknown }).content;
    if (typeof content === 'string') {
      yield content;
    } else if (Array.isArray(content)) {
      for (const part of content as ContentPart[]) {
        if (part.type === 'text') yield part.text ?? '';
        else if (part.type === 'image_url') yield imageTokens(part.image_url);
        else if (part.type === 'file') yield fileTokens(part.file);
        else if (part.type === 'input_audio') yield audioTokens(part.input_audio);
      }
    }
    const toolCalls = (message as { tool_calls?: unknown[] }).tool_calls;
    if (toolCalls?.length) yield JSON.stringify(toolCalls);
  }
  if (tools.length > 0) yield JSON.stringify(tools);
}

interface ContentPart {
  type: string;
  text?: string;
  image_url?: { url?: string; detail?: string };
  file?: { file_data?: string; filename?: string };
  input_audio?: { data?: string; format?: string };
}

function fileTokens(file: ContentPart['file']): number {
  const data = file?.file_data;
  if (typeof data !== 'string') return FILE_ID_TOKENS;
  // A data URL's payload starts after its comma.
  return Math.max(1, Math.ceil(base64Bytes(data.slice(data.indexOf(',') + 1)) / FILE_BYTES_PER_TOKEN));
}

function audioTokens(audio: ContentPart['input_audio']): number {
  const data = audio?.data ?? '';
  const bytes = base64Bytes(data);
  const bytesPerSecond = audio?.format === 'wav' ? (wavByteRate(data) ?? AUDIO_BYTES_PER_SECOND.wav) : AUDIO_BYTES_PER_SECOND.mp3;
  return Math.max(1, Math.ceil((bytes / bytesPerSecond) * AUDIO_TOKENS_PER_SECOND));
}

function base64Bytes(base64: string): number {
  const padding = base64.endsWith('==') ? 2 : base64.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((base64.length * 3) / 4) - padding);
}

/** The byte rate field of a WAV header (RIFF....WAVEfmt , bytes 28 to 31), when it is one and plausible. */
function wavByteRate(base64: string): number | undefined {
  const header = Buffer.from(base64.slice(0, 48), 'base64');
  if (header.length < 32 || header.toString('latin1', 0, 4) !== 'RIFF' || header.toString('latin1', 8, 12) !== 'WAVE') return undefined;
  const rate = header.readUInt32LE(28);
  // Outside 8 kHz mono 8-bit to 48 kHz stereo 32-bit, the header is not trusted.
  return rate >= 8_000 && rate <= 384_000 ? rate : undefined;
}

/** Counts at most a little beyond `budget`; only a complete count is remembered. */
async function countTextTokensPaced(text: string, budget: number, pacer: Pacer): Promise<number> {
  if (!text) return 0;
  const known = recall(text);
  if (known !== undefined) return known;
  let total = 0;
  for (const part of countableParts(text)) {
    total += countTokens(part, PLAIN_TEXT);
    if (total > budget) return total;
    if (pacer.due()) await pacer.yield();
  }
  remember(text, total);
  return total;
}

/** At most the text's count: every pre-tokenizer piece is at least one token, a long one more. */
async function minimumTokensPaced(text: string, budget: number, pacer: Pacer): Promise<number> {
  const known = recall(text);
  if (known !== undefined) return known;
  const pieces = new RegExp(O200K_TOKEN_SPLIT_REGEX.source, O200K_TOKEN_SPLIT_REGEX.flags);
  let total = 0;
  let seen = 0;
  for (let match = pieces.exec(text); match; match = pieces.exec(text)) {
    total += Math.ceil(match[0].length / LONGEST_TOKEN_CHARS);
    if (total > budget) return total;
    // The clock is read every 64 pieces: reading it for each cost a quarter of this loop's time.
    if ((++seen & 63) === 0 && pacer.due()) await pacer.yield();
  }
  return total;
}

/**
 * The text cut into parts whose counts add up to the text's: runs of whole pre-tokenizer
 * pieces (the tokenizer splits the text into the same pieces, so these counts are exact),
 * and pieces longer than MAX_PIECE_CHARS in slices.
 */
function* countableParts(text: string): Generator<string> {
  if (text.length <= MAX_PIECE_CHARS) {
    yield text;
    return;
  }
  const pieces = new RegExp(O200K_TOKEN_SPLIT_REGEX.source, O200K_TOKEN_SPLIT_REGEX.flags);
  let runStart = 0;
  for (let match = pieces.exec(text); match; match = pieces.exec(text)) {
    const piece = match[0];
    const end = match.index + piece.length;
    if (piece.length > MAX_PIECE_CHARS) {
      if (match.index > runStart) yield text.slice(runStart, match.index);
      for (let at = 0; at < piece.length; at += MAX_PIECE_CHARS) yield piece.slice(at, at + MAX_PIECE_CHARS);
      runStart = end;
    } else if (end - runStart >= RUN_CHARS) {
      yield text.slice(runStart, end);
      runStart = end;
    }
  }
  if (runStart < text.length) yield text.slice(runStart);
}

/** Lets the event loop run other work every SLICE_MS of counting. */
class Pacer {
  private since = performance.now();

  due(): boolean {
    return performance.now() - this.since >= SLICE_MS;
  }

  async yield(): Promise<void> {
    await yieldToEventLoop();
    this.since = performance.now();
  }
}

function recall(text: string): number | undefined {
  if (text.length < MEMO_MIN_CHARS) return undefined;
  const count = memo.get(text);
  if (count !== undefined) {
    // Most recently used last, so eviction takes the oldest.
    memo.delete(text);
    memo.set(text, count);
  }
  return count;
}

function remember(text: string, count: number): void {
  if (text.length < MEMO_MIN_CHARS || text.length > MEMO_MAX_CHARS || memo.has(text)) return;
  memo.set(text, count);
  memoChars += text.length;
  for (const [oldest] of memo) {
    if (memoChars <= MEMO_MAX_CHARS) break;
    memo.delete(oldest);
    memoChars -= oldest.length;
  }
}
