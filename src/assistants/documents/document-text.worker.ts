/**
 * A document reader's worker thread (started by document-reader.ts): reads the one file of
 * its workerData and posts its text, or why it could not be read. The process's limits on
 * this thread (heap, time) are the reader's to enforce; this side checks sizes and depth.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { DocumentReadError } from './document-read-error';
import { readText, ReadRequest } from './read-formats';

export type ReaderMessage =
  | { type: 'progress'; done: number; total: number }
  | { type: 'done'; text: string }
  | { type: 'error'; reason: DocumentReadError['reason']; message: string };

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
