/**
 * How each format's text is read. Runs inside a reader's worker thread (document-reader.ts),
 * so it imports nothing of Nest or the app: only this folder's checks, and each format's
 * parser when a file of it comes (a worker reads one file: loading all of them would double
 * the start of a worker reading plain text).
 */
/* eslint-disable @typescript-eslint/no-require-imports */
import { DocumentReadError, DocumentReadFailure } from './document-read-error';
import type { DocumentFormat } from './extract-text';
import { checkHtmlDepth } from './html-depth';
import { checkPdfStreams } from './pdf-streams';
import { checkZipArchive } from './zip-check';

export interface ReadLimits {
  /** What a DOCX, or a PDF's compressed streams, may unpack to. */
  maxUnpackedBytes: number;
  /** Unpacked over packed size of a DOCX past which it is a bomb. */
  maxCompressionRatio: number;
  maxHtmlDepth: number;
  /** Characters of text a document may have. */
  maxTextChars: number;
}

export interface ReadRequest {
  format: DocumentFormat;
  data: Uint8Array;
  limits: ReadLimits;
}

/** The text of a file, paragraphs separated by blank lines; not yet normalised. Throws DocumentReadError. */
export async function readText(request: ReadRequest, onPage: (done: number, pages: number) => void = () => undefined): Promise<string> {
  const data = Buffer.from(request.data.buffer, request.data.byteOffset, request.data.byteLength);
  const text = await readFormat(request.format, data, request.limits, onPage);
  if (text.length > request.limits.maxTextChars) {
    throw new DocumentReadError(
      'too_much_text',
      `it has more text than a document may have (over ${request.limits.maxTextChars.toLocaleString('en-US')} characters).`,
    );
  }
  return text;
}

function readFormat(format: DocumentFormat, data: Buffer, limits: ReadLimits, onPage: (done: number, pages: number) => void): Promise<string> | string {
  switch (format) {
    case 'text':
    case 'markdown':
      return decodeText(data);
    case 'html':
      return htmlText(decodeText(data), limits.maxHtmlDepth);
    case 'pdf':
      return pdfText(data, limits, onPage);
    case 'docx':
      return docxText(data, limits);
  }
}

/** UTF-8 (a BOM is dropped), UTF-16 with a BOM, or else Windows-1252; binary data is refused. */
function decodeText(data: Buffer): string {
  if (data[0] === 0xff && data[1] === 0xfe) return new TextDecoder('utf-16le').decode(data.subarray(2));
  if (data[0] === 0xfe && data[1] === 0xff) return new TextDecoder('utf-16be').decode(data.subarray(2));
  if (data.subarray(0, 8192).includes(0)) throw new DocumentReadError('invalid', 'it contains binary data, not text.');
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(data);
  } catch {
    return new TextDecoder('windows-1252').decode(data);
  }
}

/** Code, media and navigation: no text a reader would look up. */
const SKIPPED_HTML = ['script', 'style', 'noscript', 'template', 'svg', 'canvas', 'iframe', 'object', 'img', 'video', 'audio', 'nav'];

function htmlText(html: string, maxDepth: number): string {
  checkHtmlDepth(html, maxDepth);
  const { convert: htmlToText } = require('html-to-text') as typeof import('html-to-text');
  return htmlToText(html, {
    wordwrap: false,
    selectors: [
      ...SKIPPED_HTML.map((selector) => ({ selector, format: 'skip' })),
      { selector: 'a', options: { ignoreHref: true } },
      ...['h1', 'h2', 'h3', 'h4', 'h5', 'h6'].map((selector) => ({ selector, options: { uppercase: false } })),
      { selector: 'table', format: 'dataTable', options: { uppercaseHeaderCells: false, maxColumnWidth: 80 } },
    ],
  });
}

async function docxText(data: Buffer, limits: ReadLimits): Promise<string> {
  if (data[0] !== 0x50 || data[1] !== 0x4b) throw new DocumentReadError('invalid', 'it is not a DOCX file (not a ZIP archive).');
  checkZipArchive(data, limits);
  const mammoth = require('mammoth') as typeof import('mammoth');
  try {
    const result = await mammoth.extractRawText({ buffer: data });
    return result.value;
  } catch (error) {
    throw new DocumentReadError('invalid', `it is not a valid DOCX file (${error instanceof Error ? error.message : String(error)}).`);
  }
}

const PAGES_PER_BATCH = 10;

async function pdfText(data: Buffer, limits: ReadLimits, onPage: (done: number, pages: number) => void): Promise<string> {
  if (!data.subarray(0, 1024).includes('%PDF-')) throw new DocumentReadError('invalid', 'it is not a PDF (no %PDF- header).');
  checkPdfStreams(data, limits.maxUnpackedBytes);
  // pdf-parse is pdf.js underneath, whose Node build loads its own worker code with a dynamic
  // import() of an .mjs file: fine in this worker thread, which has Node's real module loader.
  const { PDFParse } = require('pdf-parse') as typeof import('pdf-parse');
  const parser = new PDFParse({ data: new Uint8Array(data), verbosity: 0 });
  const pages: string[] = [];
  try {
    // The first call reads page 1 and learns the page count; the others read batches.
    let total = -1;
    for (let next = 1; total === -1 || next <= total; ) {
      const last = total === -1 ? next : Math.min(total, next + PAGES_PER_BATCH - 1);
      const partial: number[] = [];
      for (let page = next; page <= last; page++) partial.push(page);
      const result = await parser.getText({ partial, pageJoiner: '' });
      total = result.total;
      for (const page of result.pages) pages.push(page.text);
      onPage(pages.length, total);
      next = last + 1;
    }
  } catch (error) {
    throw pdfError(error);
  } finally {
    await parser.destroy().catch(() => undefined);
  }
  // A page break inside a sentence is no paragraph break; one after a finished sentence is.
  let text = '';
  for (const page of pages.map(pdfPageText).filter(Boolean)) {
    text += text === '' ? page : /[.!?:;)"'\u201d]$/.test(text) ? `\n\n${page}` : ` ${page}`;
  }
  return text;
}

function pdfError(error: unknown): DocumentReadError {
  if (error instanceof DocumentReadError) return error;
  const { name, message } = error instanceof Error ? error : { name: undefined, message: String(error) };
  if (name === 'PasswordException') return new DocumentReadError('encrypted', 'the PDF is password-protected.');
  const reason: DocumentReadFailure = name === 'InvalidPDFException' || name === 'FormatError' ? 'invalid' : 'failed';
  return new DocumentReadError(reason, reason === 'invalid' ? `the file is not a valid PDF (${message}).` : `the PDF could not be read (${message}).`);
}

/**
 * A PDF page has visual lines, not paragraphs: lines are joined with spaces, except after a
 * line much shorter than the page's usual line, which ends a paragraph (or is a heading).
 */
function pdfPageText(page: string): string {
  const lines = page
    .split('\n')
    .map((line) => line.replace(/\s+/g, ' ').trim())
    .filter(Boolean);
  if (lines.length === 0) return '';
  const lengths = lines.map((line) => line.length).sort((a, b) => a - b);
  const usual = lengths[Math.floor(lengths.length * 0.8)];
  let text = '';
  lines.forEach((line, i) => {
    if (i > 0) text += lines[i - 1].length < usual * 0.6 ? '\n\n' : ' ';
    text += line;
  });
  return text;
}
