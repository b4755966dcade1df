import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/** Why a PDF could not be read, in words fit for the uploader. */
export class PdfTextError extends Error {
  constructor(
    message: string,
    readonly reason: 'invalid' | 'encrypted' | 'timeout' | 'failed',
  ) {
    super(message);
    this.name = 'PdfTextError';
  }
}

export interface PdfTextOptions {
  /** The worker is stopped after this long, and the PDF refused. */
  timeoutMs?: number;
  /** Called after each batch of pages. */
  onPage?: (pagesDone: number, pages: number) => void;
}

const DEFAULT_TIMEOUT_MS = 120_000;
const PAGES_PER_BATCH = 10;
/** pdf.js holds the whole document and its fonts; a hostile file cannot take more than this. */
const WORKER_HEAP_MB = 1024;

/**
 * Runs in a worker thread (as plain CommonJS, so it works the same from the compiled app and
 * under ts-jest). pdf-parse is pdf.js underneath, whose Node build loads its own worker code
 * with a dynamic `import()` of an `.mjs` file: that needs Node's real module loader, which a
 * worker thread has and jest's sandbox does not.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { PDFParse } = require(workerData.modulePath);
(async () => {
  const parser = new PDFParse({ data: workerData.data, verbosity: 0 });
  try {
    const pages = [];
    // The first call reads page 1 and learns the page count; the others read batches.
    let total = -1;
    for (let next = 1; total === -1 || next <= total; ) {
      const last = total === -1 ? next : Math.min(total, next + workerData.batch - 1);
      const partial = [];
      for (let page = next; page <= last; page++) partial.push(page);
      const result = await parser.getText({ partial, pageJoiner: '' });
      total = result.total;
      for (const page of result.pages) pages.push(page.text);
      parentPort.postMessage({ type: 'progress', done: pages.length, total });
      next = last + 1;
    }
    parentPort.postMessage({ type: 'done', pages });
  } catch (error) {
    parentPort.postMessage({ type: 'error', name: error && error.name, message: String(error && error.message) });
  } finally {
    await parser.destroy().catch(() => undefined);
  }
})();
`;

/** At most this many PDFs are parsed at once; the others wait their turn. */
const MAX_CONCURRENT = Math.max(1, availableParallelism() - 1);
let running = 0;
const waiting: Array<() => void> = [];

async function withSlot<T>(work: () => Promise<T>): Promise<T> {
  if (running >= MAX_CONCURRENT) await new Promise<void>((resolve) => waiting.push(resolve));
  running++;
  try {
    return await work();
  } finally {
    running--;
    waiting.shift()?.();
  }
}

/**
 * The text of each page of a PDF, extracted with pdf-parse in a worker thread: parsing a
 * large PDF is seconds of CPU that must not stall the event loop, and a file that makes the
 * parser hang or balloon is stopped by the timeout and the worker's heap limit.
 */
export function extractPdfPages(data: Uint8Array, options: PdfTextOptions = {}): Promise<string[]> {
  return withSlot(
    () =>
      new Promise<string[]>((resolve, reject) => {
        const worker = new Worker(WORKER_SOURCE, {
          eval: true,
          workerData: { modulePath: require.resolve('pdf-parse'), data, batch: PAGES_PER_BATCH },
          resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB },
          stdout: true,
          stderr: true,
        });
        // pdf.js warns about odd fonts and the like on the console: not for our stdout (the CLI prints JSON there).
        worker.stdout.resume();
        worker.stderr.resume();
        let settled = false;
        const finish = (error: Error | null, pages?: string[]) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          void worker.terminate();
          if (error) reject(error);
          else resolve(pages!);
        };
        const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
        const timer = setTimeout(
          () => finish(new PdfTextError(`Reading the PDF took longer than ${Math.round(timeoutMs / 1000)} s.`, 'timeout')),
          timeoutMs,
        );
        worker.on('message', (message: { type: string; done?: number; total?: number; pages?: string[]; name?: string; message?: string }) => {
          if (message.type === 'progress') options.onPage?.(message.done!, message.total!);
          else if (message.type === 'done') finish(null, message.pages);
          else finish(pdfError(message.name, message.message));
        });
        worker.on('error', (error) => finish(new PdfTextError(`The PDF could not be read: ${error.message}`, 'failed')));
        worker.on('exit', (code) => finish(new PdfTextError(`The PDF reader stopped unexpectedly (exit code ${code}).`, 'failed')));
      }),
  );
}

function pdfError(name: string | undefined, message: string | undefined): PdfTextError {
  if (name === 'PasswordException') return new PdfTextError('The PDF is password-protected.', 'encrypted');
  if (name === 'InvalidPDFException' || name === 'FormatError') {
    return new PdfTextError(`The file is not a valid PDF (${message ?? 'invalid structure'}).`, 'invalid');
  }
  return new PdfTextError(`The PDF could not be read: ${message ?? 'unknown error'}`, 'failed');
}
