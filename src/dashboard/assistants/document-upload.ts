import { Injectable, NestMiddleware } from '@nestjs/common';
import type { NextFunction, Response } from 'express';
import type { IncomingMessage } from 'node:http';
import { formatBytes, MAX_FILE_BYTES } from '../../assistants/documents/document-limits';
import type { AppConfig } from '../../config/app-config';
import { continueBody } from '../../common/http/expect-continue';
import { InjectConfig } from '../../config/config.module';
import type { PageRequest } from '../page-request';

/** Files in one upload, and the bytes of the whole request (every tier shares these). */
export const MAX_FILES_PER_UPLOAD = 10;
export const MAX_UPLOAD_BYTES = 3 * MAX_FILE_BYTES;

/** What a refused upload's script is told to wait before trying again (429). */
export const UPLOAD_BUSY_RETRY_AFTER_SECONDS = 10;

/** A file of a multipart upload: its data is a view into the body read into memory. */
export interface UploadedFile {
  name: string;
  mimeType: string;
  data: Buffer;
}

/** A dashboard request to the upload route. */
export interface UploadRequest extends PageRequest {
  /** The first bytes of the body, read by UploadTokenReader to find the form's CSRF token. */
  uploadHead?: Buffer;
}

/** The files of an upload, or why it was refused, with the status a script is answered with. */
export type ReceivedUpload =
  | { files: UploadedFile[] }
  | { refusal: string; status: number; retryAfterSeconds?: number };

/** At most this much of a body is read before the guard, to find the form's CSRF token. */
const HEAD_BYTES = 4096;
const CSRF_FIELD = /name="_csrf"\r\n\r\n([^\r\n]{1,512})\r\n/;

/**
 * Runs before DashboardGuard on an upload, and leaves it a way to read no more of the body
 * than the form's CSRF token (the form puts it first; a form posted without JavaScript cannot
 * send it as a header), which the guard calls once the session, membership and role passed:
 * a refused upload's body is not read at all, and a client that sent `Expect: 100-continue`
 * gets no `100 Continue` (see continueBody). The rest of the body is read only by
 * DocumentUploads, in the handler. Until then the response says `Connection: close`: a
 * refusal closes the connection rather than letting Node read and discard the rest of a
 * body nobody will use.
 */
@Injectable()
export class UploadTokenReader implements NestMiddleware {
  use(req: UploadRequest, res: Response, next: NextFunction): void {
    if (req.method !== 'POST') return next();
    res.setHeader('Connection', 'close');
    // Without a session the guard refuses anyway; a script (assistants.js, htmx) sends the token as a header.
    if (!isMultipart(req) || !req.session?.userId || req.headers['x-csrf-token'] !== undefined) return next();
    req.readCsrfTokenFromBody = async () => {
      try {
        continueBody(res);
        req.uploadHead = await readHead(req);
        const token = CSRF_FIELD.exec(req.uploadHead.toString('latin1'));
        req.body = token ? { _csrf: token[1] } : {};
      } catch {
        // The client went away: the guard refuses the request without a token.
        req.body = {};
      }
    };
    next();
  }
}

/**
 * Receives the body of an upload the guard let through, a bounded number at a time: per
 * workspace (one tenant cannot hold every slot) and per process (the bodies are held in
 * memory until stored). A refusal reads nothing more of the body; the connection closes
 * after the answer (see UploadTokenReader).
 */
@Injectable()
export class DocumentUploads {
  private receiving = 0;
  private readonly receivingByWorkspace = new Map<string, number>();

  constructor(@InjectConfig() private readonly config: AppConfig) {}

  /** Reads and parses the body; the slot it takes is given back when the response closes. */
  async receive(req: UploadRequest, res: Response, workspaceId: string): Promise<ReceivedUpload> {
    // Not a form with files (a form's urlencoded body is read by then, any other is left unread).
    if (!isMultipart(req)) return { files: [] };
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > MAX_UPLOAD_BYTES) return tooLarge();
    const busy = this.admit(workspaceId, res);
    if (busy) return { refusal: busy, status: 429, retryAfterSeconds: UPLOAD_BUSY_RETRY_AFTER_SECONDS };

    let body: Buffer | null;
    try {
      continueBody(res);
      body = await readCapped(req, MAX_UPLOAD_BYTES, req.uploadHead);
    } catch {
      return unreadable();
    }
    if (body === null) return tooLarge();
    // The whole body is read: the connection may be kept alive again.
    if (!res.headersSent) res.removeHeader('Connection');
    try {
      return { files: parseFiles(body, req.headers['content-type'] ?? '') };
    } catch {
      return unreadable();
    }
  }

  /** Uploads of the workspace being received now, by this process. */
  receivingFor(workspaceId: string): number {
    return this.receivingByWorkspace.get(workspaceId) ?? 0;
  }

  /** Takes a slot for the workspace's upload, or says why none is free. */
  private admit(workspaceId: string, res: Response): string | null {
    const { perWorkspace, perProcess } = this.config.uploads;
    const ofWorkspace = this.receivingByWorkspace.get(workspaceId) ?? 0;
    if (ofWorkspace >= perWorkspace) {
      return `This workspace already has ${ofWorkspace} upload${ofWorkspace === 1 ? '' : 's'} on the way (at most ${perWorkspace} at a time): try again when ${ofWorkspace === 1 ? 'it has' : 'they have'} finished.`;
    }
    if (this.receiving >= perProcess) return 'The server is receiving as many uploads as it can right now: try again in a few seconds.';
    this.receiving += 1;
    this.receivingByWorkspace.set(workspaceId, ofWorkspace + 1);
    res.once('close', () => {
      this.receiving -= 1;
      const left = (this.receivingByWorkspace.get(workspaceId) ?? 1) - 1;
      if (left > 0) this.receivingByWorkspace.set(workspaceId, left);
      else this.receivingByWorkspace.delete(workspaceId);
    });
    return null;
  }
}

function isMultipart(req: IncomingMessage): boolean {
  return /^multipart\/form-data/i.test(req.headers['content-type'] ?? '');
}

function tooLarge(): ReceivedUpload {
  return { refusal: `An upload may be at most ${formatBytes(MAX_UPLOAD_BYTES)} in all: upload fewer files at a time.`, status: 413 };
}

function unreadable(): ReceivedUpload {
  return { refusal: 'The upload could not be read (it was cut off or malformed). Try again.', status: 400 };
}

/** Parts of a multipart body beyond which it is refused unparsed: a form has a token and a few files. */
const MAX_PARTS = 100;

/**
 * The files of a multipart/form-data body (RFC 7578). Each file's data is a view into
 * `body`, never a copy: an upload costs its own size in memory, not several times it.
 * Throws on a body that is not well-formed multipart.
 */
export function parseFiles(body: Buffer, contentType: string): UploadedFile[] {
  const boundary = /;\s*boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType);
  if (!boundary) throw new Error('No multipart boundary');
  const delimiter = Buffer.from(`\r\n--${boundary[1] ?? boundary[2]}`);
  // The first delimiter may start the body, without the CRLF before it.
  let position = body.indexOf(delimiter.subarray(2));
  if (position < 0) throw new Error('No multipart part');
  position += delimiter.length - 2;
  const files: UploadedFile[] = [];
  for (let parts = 0; body.toString('latin1', position, position + 2) !== '--'; parts++) {
    if (parts >= MAX_PARTS) throw new Error('Too many parts');
    const headersStart = body.indexOf('\r\n', position) + 2;
    const headersEnd = body.indexOf('\r\n\r\n', headersStart - 2);
    const end = headersEnd < 0 ? -1 : body.indexOf(delimiter, headersEnd + 4);
    if (headersStart < 2 || headersEnd < 0 || end < 0) throw new Error('A multipart part is cut off');
    if (headersEnd - headersStart > HEAD_BYTES) throw new Error('A multipart part has too long headers');
    const headers = partHeaders(body.toString('utf8', headersStart, headersEnd));
    // A form posted with no file chosen sends one nameless, empty part.
    if (headers.name === 'files' && headers.fileName !== undefined && (headers.fileName || end > headersEnd + 4)) {
      files.push({ name: headers.fileName, mimeType: headers.contentType, data: body.subarray(headersEnd + 4, end) });
    }
    position = end + delimiter.length;
  }
  return files;
}

/** A part's field name, file name and type, decoded as browsers encode them (HTML's form submission). */
function partHeaders(text: string): { name?: string; fileName?: string; contentType: string } {
  const result: { name?: string; fileName?: string; contentType: string } = { contentType: 'text/plain' };
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    const header = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (header === 'content-type' && value) result.contentType = value.toLowerCase();
    if (header !== 'content-disposition') continue;
    for (const [, key, quoted, bare] of value.matchAll(/;\s*([a-z*]+)=(?:"([^"]*)"|([^;\s]*))/gi)) {
      // Browsers escape only these three in names (HTML's multipart/form-data encoding).
      const decoded = (quoted ?? bare).replace(/%22/gi, '"').replace(/%0D/gi, '\r').replace(/%0A/gi, '\n');
      if (key.toLowerCase() === 'name') result.name = decoded;
      if (key.toLowerCase() === 'filename') result.fileName = decoded;
    }
  }
  return result;
}

/**
 * The start of the body: up to the form's CSRF field, at most HEAD_BYTES (more only if one
 * chunk brought it). The stream is paused afterwards, the rest left for readCapped.
 */
async function readHead(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let length = 0;
  await consume(req, (chunk) => {
    chunks.push(chunk);
    length += chunk.length;
    return length >= HEAD_BYTES || CSRF_FIELD.test(Buffer.concat(chunks).toString('latin1'));
  });
  return Buffer.concat(chunks, length);
}

/**
 * The whole body (after `head`, already read), or null as soon as it passes `cap`: the
 * stream is then left paused, nothing more of it read. With a Content-Length the body is
 * copied into one buffer as it comes, so it is never held twice.
 */
async function readCapped(req: IncomingMessage, cap: number, head: Buffer = Buffer.alloc(0)): Promise<Buffer | null> {
  const declared = req.headers['content-length'] === undefined ? undefined : Number(req.headers['content-length']);
  if (head.length > cap || (declared !== undefined && declared > cap)) return null;
  const whole = declared === undefined ? undefined : Buffer.allocUnsafe(declared);
  const chunks: Buffer[] = [];
  let length = 0;
  let over = false;
  const add = (chunk: Buffer): boolean => {
    if (length + chunk.length > (whole?.length ?? cap)) return (over = true);
    if (whole) chunk.copy(whole, length);
    else chunks.push(chunk);
    length += chunk.length;
    return false;
  };
  add(head);
  await consume(req, add);
  if (over) return null;
  return whole ? whole.subarray(0, length) : Buffer.concat(chunks, length);
}

/**
 * Gives each chunk to `take` until it says it has enough (the stream is then paused) or the
 * body ends; rejects when the client goes away first.
 */
function consume(req: IncomingMessage, take: (chunk: Buffer) => boolean): Promise<void> {
  if (req.readableEnded) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const done = (error?: Error): void => {
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
      if (error) reject(error);
      else resolve();
    };
    const onData = (chunk: Buffer): void => {
      if (!take(chunk)) return;
      req.pause();
      done();
    };
    const onEnd = (): void => done();
    const onError = (error: Error): void => done(error);
    const onClose = (): void => done(new Error('The client closed the connection before the end of the upload.'));
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
    req.resume();
  });
}
