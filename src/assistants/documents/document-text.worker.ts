/**
 * A document reader's worker thread (started by document-reader.ts): reads the one file of
 * its workerData, normalises its text and splits it into chunks (counting tokens is seconds
 * of CPU for a large file: not for the event loop either), and posts the chunks, or why it
 * could not be read. The process's limits on this thread (heap, time) are the reader's to
 * enforce; this side checks sizes and depth.
 */
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import * as path from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import type { ChunkingOptions, TextChunk } from './chunking';
import { DocumentReadError } from './document-read-error';
import { readText, ReadRequest } from './read-formats';

export type ReaderMessage =
  | { type: 'progress'; done: number; total: number }
  /** The text is read and normalised: `characters` of it (0: none) are being split. */
  | { type: 'chunking'; characters: number }
  | { type: 'done'; chunks: TextChunk[] }
  | { type: 'error'; reason: DocumentReadError['reason']; message: string };

/** How much lower than the process's other threads a reader runs (nice 10). */
const READER_NICENESS = 10;

/**
 * The reader gives way to the event loop's thread when the cores are busy: on Linux each
 * thread has its own nice value, set through its thread id (/proc/thread-self). Elsewhere
 * the reader keeps the process's priority.
 */
function yieldToTheEventLoop(): void {
  try {
    const threadId = Number(path.basename(readlinkSync('/proc/thread-self')));
    if (Number.isInteger(threadId) && threadId > 0) setPriority(threadId, READER_NICENESS);
  } catch {
    // not Linux, or not allowed: the same priority as the rest of the process
  }
}

yieldToTheEventLoop();
const port = parentPort!;
const post = (message: ReaderMessage) => port.postMessage(message);

async function read(request: ReadRequest, chunking: ChunkingOptions | undefined): Promise<TextChunk[]> {
  const raw = await readText(request, (done, total) => post({ type: 'progress', done, total }));
  // Loaded once there is text: the tokenizer takes most of a second and tens of MB to load,
  // which a file refused by its checks never needs.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { chunkText, DEFAULT_CHUNKING, normalizeText } = require('./chunking') as typeof import('./chunking');
  const text = normalizeText(raw);
  post({ type: 'chunking', characters: text.length });
  return text ? chunkText(text, chunking ?? DEFAULT_CHUNKING) : [];
}

const { request, chunking } = workerData as { request: ReadRequest; chunking?: ChunkingOptions };
read(request, chunking).then(
  (chunks) => post({ type: 'done', chunks }),
  (error: unknown) =>
    post(
      error instanceof DocumentReadError
        ? { type: 'error', reason: error.reason, message: error.message }
        : { type: 'error', reason: 'failed', message: error instanceof Error ? error.message : String(error) },
    ),
);
