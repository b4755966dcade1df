import { Injectable } from '@nestjs/common';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import type { ChunkingOptions, TextChunk } from './chunking';
import { DocumentReadError } from './document-read-error';
import type { ReaderMessage } from './document-text.worker';
import type { DocumentFormat } from './extract-text';
import { MAX_HTML_DEPTH } from './html-depth';
import type { ReadLimits } from './read-formats';

/** A DOCX unpacking to more than this many times its size is a bomb, not a document. */
export const MAX_COMPRESSION_RATIO = 100;
/** Characters of text one document may have: a 20 MB text file's worth. */
export const MAX_TEXT_CHARS = 20_000_000;
/** How often the process's memory is looked at while files are being read. */
const WATCH_EVERY_MS = 100;
/** Room the watchdog leaves beyond the readers' own bounds (the app's own allocations meanwhile). */
const WATCHDOG_SLACK_BYTES = 256 * 1024 * 1024;

const WORKER_ENTRY = path.join(__dirname, `document-text.worker${path.extname(__filename)}`);

/**
 * Starts the worker's entry. From the compiled app that is plain `require`; when this file
 * runs as TypeScript (under ts-jest), the entry and its local imports are transpiled here once
 * and handed over as sources, since a worker thread has Node's loader and no TypeScript.
 */
const BOOTSTRAP = `
const { workerData } = require('node:worker_threads');
if (workerData.sources) {
  require.extensions['.ts'] = (module, filename) => module._compile(workerData.sources[filename], filename);
}
require(workerData.entry);
`;

export interface ReadOptions {
  /** PDF only: after each batch of pages. */
  onPage?: (pagesDone: number, pages: number) => void;
  /** Once the text is read and normalised, as its splitting into chunks starts. */
  onChunking?: (characters: number) => void;
  /** Chunk size and overlap (the assistant's); DEFAULT_CHUNKING when absent. */
  chunking?: ChunkingOptions;
}

/** A worker reading now, as the watchdog stops it. */
interface Reading {
  fail(error: DocumentReadError): void;
}

/**
 * Reads documents in worker threads (their text, split into chunks), each file in a fresh worker (no file's leftovers
 * reach the next; starting one costs tens of milliseconds against reads of seconds), at most
 * DOCUMENT_READERS at once per process; the others wait their turn. A worker is killed when
 * its heap passes DOCUMENT_READ_MEMORY_MB (V8's resourceLimits), when it runs past
 * DOCUMENT_READ_TIMEOUT_SECONDS, or, as a last guard for memory outside any heap (typed
 * arrays, zlib), when the process grows past what the readers are allowed together. Killing
 * a worker ends its thread only: the process and its requests go on.
 */
@Injectable()
export class DocumentReader {
  private readonly limits: ReadLimits;
  private readonly active = new Set<Reading>();
  private slotsTaken = 0;
  private readonly waiting: Array<() => void> = [];
  private watchdog: NodeJS.Timeout | undefined;
  private baselineRss = 0;

  constructor(@InjectConfig() private readonly config: AppConfig) {
    this.limits = {
      maxUnpackedBytes: config.documents.maxUnpackedBytes,
      maxCompressionRatio: MAX_COMPRESSION_RATIO,
      maxHtmlDepth: MAX_HTML_DEPTH,
      maxTextChars: MAX_TEXT_CHARS,
    };
  }

  /** Workers reading now (for metrics and tests): never more than DOCUMENT_READERS. */
  get reading(): number {
    return this.active.size;
  }

  /** The file's text, normalised and split into chunks (none: the file has no text). Throws DocumentReadError. */
  async read(format: DocumentFormat, data: Uint8Array, options: ReadOptions = {}): Promise<TextChunk[]> {
    await this.acquire();
    try {
      return await this.readInWorker(format, data, options);
    } finally {
      this.release();
    }
  }

  /** A reading slot; a waiter is handed the slot of the reader that ends, so there are never more than DOCUMENT_READERS. */
  private async acquire(): Promise<void> {
    if (this.slotsTaken < this.config.documents.readers) {
      this.slotsTaken++;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.slotsTaken--;
  }

  private readInWorker(format: DocumentFormat, data: Uint8Array, options: ReadOptions): Promise<TextChunk[]> {
    const { readTimeoutMs, readMemoryMb } = this.config.documents;
    return new Promise<TextChunk[]>((resolve, reject) => {
      const worker = new Worker(BOOTSTRAP, {
        eval: true,
        workerData: {
          entry: WORKER_ENTRY,
          sources: workerSources(),
          request: { format, data, limits: this.limits },
          chunking: options.chunking,
        },
        resourceLimits: { maxOldGenerationSizeMb: readMemoryMb },
        // Parsers warn about odd fonts and the like on the console: not for our stdout (the CLI prints JSON there).
        stdout: true,
        stderr: true,
      });
      worker.stdout.resume();
      worker.stderr.resume();
      let settled = false;
      const finish = (error: DocumentReadError | null, chunks?: TextChunk[]) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.active.delete(reading);
        if (this.active.size === 0) this.stopWatchdog();
        void worker.terminate();
        if (error) reject(error);
        else resolve(chunks!);
      };
      const reading: Reading = { fail: (error) => finish(error) };
      this.active.add(reading);
      this.startWatchdog();
      const timer = setTimeout(
        () => finish(new DocumentReadError('timeout', `it took too long to read (over ${Math.round(readTimeoutMs / 1000)} s).`)),
        readTimeoutMs,
      );
      worker.on('message', (message: ReaderMessage) => {
        if (message.type === 'progress') options.onPage?.(message.done, message.total);
        else if (message.type === 'chunking') options.onChunking?.(message.characters);
        else if (message.type === 'done') finish(null, message.chunks);
        else finish(new DocumentReadError(message.reason, message.message));
      });
      worker.on('error', (error: Error & { code?: string }) =>
        finish(
          error.code === 'ERR_WORKER_OUT_OF_MEMORY'
            ? tooMuchMemory()
            : new DocumentReadError('failed', `its reader stopped with an error (${error.message}).`),
        ),
      );
      worker.on('exit', (code) => finish(new DocumentReadError('failed', `its reader stopped unexpectedly (exit code ${code}).`)));
    });
  }

  /**
   * Memory outside V8's heaps is not bounded by resourceLimits: if the process grows past
   * the readers' allowance while they run, they are all stopped (which one grew cannot be told).
   */
  private startWatchdog(): void {
    if (this.watchdog) return;
    this.baselineRss = process.memoryUsage.rss();
    const { readers, readMemoryMb, maxUnpackedBytes } = this.config.documents;
    const allowance = readers * (readMemoryMb * 1024 * 1024 + 2 * maxUnpackedBytes) + WATCHDOG_SLACK_BYTES;
    this.watchdog = setInterval(() => {
      if (process.memoryUsage.rss() - this.baselineRss <= allowance) return;
      for (const reading of [...this.active]) reading.fail(tooMuchMemory());
    }, WATCH_EVERY_MS).unref();
  }

  private stopWatchdog(): void {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
  }
}

function tooMuchMemory(): DocumentReadError {
  return new DocumentReadError('memory', 'it used too much memory while being read.');
}

let sources: Record<string, string> | undefined | null = null;

/** Null from the compiled app; under TypeScript, the worker entry and the local files it imports, transpiled. */
function workerSources(): Record<string, string> | undefined {
  if (sources !== null) return sources;
  if (!WORKER_ENTRY.endsWith('.ts')) return (sources = undefined);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const ts = require('typescript') as typeof import('typescript');
  const transpiled: Record<string, string> = {};
  const pending = [WORKER_ENTRY];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (transpiled[file] !== undefined) continue;
    const source = readFileSync(file, 'utf8');
    transpiled[file] = ts.transpileModule(source, {
      fileName: file,
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true, sourceMap: false },
    }).outputText;
    // Local modules it imports, or requires when it needs them.
    for (const match of source.matchAll(/^import (?!type )[^;]*? from '(\.[^']+)';$|require\('(\.[^']+)'\)/gm)) {
      pending.push(path.resolve(path.dirname(file), `${match[1] ?? match[2]}.ts`));
    }
  }
  return (sources = transpiled);
}
