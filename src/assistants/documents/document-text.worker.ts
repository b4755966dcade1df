/**
 * A document reader's worker thread (started by document-reader.ts): reads the one file of
 * its workerData and posts its text, or why it could not be read. The process's limits on
 * this thread (heap, time) are the reader's to enforce; this side checks sizes and depth.
 */
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import * as path from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { DocumentReadError } from './document-read-error';
import { readText, ReadRequest } from './read-formats';

export type ReaderMessage =
  | { type: 'progress'; done: number; total: number }
  | { type: 'done'; text: string }
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

readText((workerData as { request: ReadRequest }).request, (done, total) => post({ type: 'progress', done, total })).then(
  (text) => post({ type: 'done', text }),
  (error: unknown) =>
    post(
      error instanceof DocumentReadError
        ? { type: 'error', reason: error.reason, message: error.message }
        : { type: 'error', reason: 'failed', message: error instanceof Error ? error.message : String(error) },
    ),
);
