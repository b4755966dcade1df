import { Injectable, NestMiddleware } from '@nestjs/common';
import type { NextFunction, Response } from 'express';
import { MAX_FILE_BYTES } from '../../assistants/documents/document-limits';
import type { PageRequest } from '../page-request';

/** Files in one upload, and the bytes of the whole request (every tier shares these). */
export const MAX_FILES_PER_UPLOAD = 10;
export const MAX_UPLOAD_BYTES = 3 * MAX_FILE_BYTES;

/** A file of a multipart upload, read into memory. */
export interface UploadedFile {
  name: string;
  mimeType: string;
  data: Buffer;
}

/** A dashboard request whose multipart body DocumentUploadParser read. */
export interface UploadRequest extends PageRequest {
  uploadedFiles?: UploadedFile[];
  /** Why the body could not be read, for the page to say (the guard still runs first). */
  uploadError?: string;
}

/**
 * Reads the multipart body of a document upload before the guard runs, because the guard
 * checks the CSRF token of the form, which is in that body (a form posted without
 * JavaScript cannot send it as a header). Only a request with a signed-in session is read
 * (anyone else is refused by the guard without their bytes being buffered); the body is
 * capped at MAX_UPLOAD_BYTES, and one over the cap is read to its end and dropped, so the
 * browser gets the page that says so rather than a reset connection. Parsing is Node's own
 * (undici's `Response.formData()`), so no multipart dependency is needed.
 */
@Injectable()
export class DocumentUploadParser implements NestMiddleware {
  async use(req: UploadRequest, _res: Response, next: NextFunction): Promise<void> {
    const contentType = req.headers['content-type'] ?? '';
    if (req.method !== 'POST' || !/^multipart\/form-data/i.test(contentType) || !req.session?.userId) return next();
    try {
      const { body, head } = await readCapped(req, MAX_UPLOAD_BYTES);
      if (body === null) {
        // The form puts its CSRF token first: read it from the beginning, so the guard can let the page say why.
        const token = /name="_csrf"\r\n\r\n([^\r\n]{1,512})\r\n/.exec(head.toString('latin1'));
        req.body = token ? { _csrf: token[1] } : {};
        req.uploadError = `An upload may be at most ${Math.round(MAX_UPLOAD_BYTES / 1024 / 1024)} MB in all: upload fewer files at a time.`;
        return next();
      }
      const form = await new Response(body, { headers: { 'content-type': contentType } }).formData();
      const fields: Record<string, string> = {};
      const files: UploadedFile[] = [];
      for (const [name, value] of form) {
        if (typeof value === 'string') fields[name] = value;
        // A form posted with no file chosen sends one nameless, empty part.
        else if (name === 'files' && (value.name || value.size > 0)) {
          files.push({ name: value.name, mimeType: value.type, data: Buffer.from(await value.arrayBuffer()) });
        }
      }
      req.body = fields;
      req.uploadedFiles = files;
    } catch {
      req.body = {};
      req.uploadError = 'The upload could not be read (it was cut off or malformed). Try again.';
    }
    next();
  }
}

/** Bytes of a body kept when it is over the cap, to find the form's first fields. */
const HEAD_BYTES = 4096;

/**
 * The whole body, or null when it is longer than `cap` (then read to the end all the same);
 * `head` is its first HEAD_BYTES either way.
 */
async function readCapped(req: NodeJS.ReadableStream, cap: number): Promise<{ body: Buffer | null; head: Buffer }> {
  const parts: Buffer[] = [];
  let head = Buffer.alloc(0);
  let length = 0;
  for await (const chunk of req) {
    const part = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (head.length < HEAD_BYTES) head = Buffer.concat([head, part.subarray(0, HEAD_BYTES - head.length)]);
    length += part.length;
    if (length <= cap) parts.push(part);
    else parts.length = 0;
  }
  return { body: length <= cap ? Buffer.concat(parts, length) : null, head };
}
