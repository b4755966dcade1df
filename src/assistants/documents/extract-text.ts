import * as path from 'node:path';
import { ApiError } from '../../common/errors/api-error';

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
