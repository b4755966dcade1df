import { convert as htmlToText } from 'html-to-text';
import mammoth from 'mammoth';
import * as path from 'node:path';
import { ApiError } from '../../common/errors/api-error';
import { extractPdfPages, PdfTextError } from './pdf-text';

export const DOCUMENT_FORMATS = ['text', 'markdown', 'html', 'pdf', 'docx'] as const;
export type DocumentFormat = (typeof DOCUMENT_FORMATS)[number];

interface FormatDefinition {
  /** The MIME type stored with the document. */
  mimeType: string;
  extensions: string[];
  /** MIME types that name the format when the file name does not. */
  mimeTypes: string[];
}

const FORMATS: Record<DocumentFormat, FormatDefinition> = {
  text: { mimeType: 'text/plain', extensions: ['.txt', '.text'], mimeTypes: ['text/plain'] },
  markdown: { mimeType: 'text/markdown', extensions: ['.md', '.markdown'], mimeTypes: ['text/markdown', 'text/x-markdown'] },
  html: { mimeType: 'text/html', extensions: ['.html', '.htm'], mimeTypes: ['text/html', 'application/xhtml+xml'] },
  pdf: { mimeType: 'application/pdf', extensions: ['.pdf'], mimeTypes: ['application/pdf'] },
  docx: {
    mimeType: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
    extensions: ['.docx'],
    mimeTypes: ['application/vnd.openxmlformats-officedocument.wordprocessingml.document'],
  },
};

export const SUPPORTED_EXTENSIONS = DOCUMENT_FORMATS.flatMap((format) => FORMATS[format].extensions);

export function mimeTypeOf(format: DocumentFormat): string {
  return FORMATS[format].mimeType;
}

/**
 * The format of an upload: by its extension, or by its MIME type when the extension says
 * nothing we know. Anything else is a 400 that names the type.
 */
export function detectFormat(fileName: string, mimeType?: string): DocumentFormat {
  const extension = path.extname(fileName).toLowerCase();
  const byExtension = DOCUMENT_FORMATS.find((format) => FORMATS[format].extensions.includes(extension));
  if (byExtension) return byExtension;
  const mime = mimeType?.split(';')[0].trim().toLowerCase();
  const byMime = mime ? DOCUMENT_FORMATS.find((format) => FORMATS[format].mimeTypes.includes(mime)) : undefined;
  if (byMime) return byMime;
  const supported = `Supported file types: ${SUPPORTED_EXTENSIONS.join(', ')}.`;
  const type = extension || mime;
  throw ApiError.badRequest(
    type ? `Unsupported file type "${type}" (${fileName}). ${supported}` : `Unsupported file type: ${fileName} has no extension. ${supported}`,
    'file',
    'unsupported_file_type',
  );
}

export interface ExtractOptions {
  /** PDF only: after each batch of pages. */
  onPage?: (pagesDone: number, pages: number) => void;
  pdfTimeoutMs?: number;
}

/**
 * The text of a file, paragraphs separated by blank lines; not yet normalised. Files that
 * are not what their type says are a 400 naming the file.
 */
export async function extractText(format: DocumentFormat, data: Buffer, fileName: string, options: ExtractOptions = {}): Promise<string> {
  switch (format) {
    case 'text':
    case 'markdown':
      return decodeText(data, fileName);
    case 'html':
      return htmlText(decodeText(data, fileName));
    case 'pdf':
      return pdfText(data, fileName, options);
    case 'docx':
      return docxText(data, fileName);
  }
}

function unreadable(fileName: string, why: string): ApiError {
  return ApiError.badRequest(`${fileName} could not be read: ${why}`, 'file', 'unreadable_file');
}

/** UTF-8 (a BOM is dropped), UTF-16 with a BOM, or else Windows-1252; binary data is refused. */
function decodeText(data: Buffer, fileName: string): string {
  if (data[0] === 0xff && data[1] === 0xfe) return new TextDecoder('utf-16le').decode(data.subarray(2));
  if (data[0] === 0xfe && data[1] === 0xff) return new TextDecoder('utf-16be').decode(data.subarray(2));
  if (data.subarray(0, 8192).includes(0)) throw unreadable(fileName, 'it contains binary data, not text.');
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(data);
  } catch {
    return new TextDecoder('windows-1252').decode(data);
  }
}

/** Code, media and navigation: no text a reader would look up. */
const SKIPPED_HTML = ['script', 'style', 'noscript', 'template', 'svg', 'canvas', 'iframe', 'object', 'img', 'video', 'audio', 'nav'];

function htmlText(html: string): string {
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

async function pdfText(data: Buffer, fileName: string, options: ExtractOptions): Promise<string> {
  if (!data.subarray(0, 1024).includes('%PDF-')) throw unreadable(fileName, 'it is not a PDF (no %PDF- header).');
  let pages: string[];
  try {
    pages = await extractPdfPages(new Uint8Array(data), { onPage: options.onPage, timeoutMs: options.pdfTimeoutMs });
  } catch (error) {
    if (error instanceof PdfTextError) throw unreadable(fileName, error.message);
    throw error;
  }
  // A page break inside a sentence is no paragraph break; one after a finished sentence is.
  let text = '';
  for (const page of pages.map(pdfPageText).filter(Boolean)) {
    text += text === '' ? page : /[.!?:;)"'\u201d]$/.test(text) ? `\n\n${page}` : ` ${page}`;
  }
  return text;
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

async function docxText(data: Buffer, fileName: string): Promise<string> {
  if (data[0] !== 0x50 || data[1] !== 0x4b) throw unreadable(fileName, 'it is not a DOCX file (not a ZIP archive).');
  try {
    const result = await mammoth.extractRawText({ buffer: data });
    return result.value;
  } catch (error) {
    throw unreadable(fileName, `it is not a valid DOCX file (${error instanceof Error ? error.message : String(error)}).`);
  }
}
