import { constants, inflateSync } from 'node:zlib';
import { DocumentReadError, megabytes } from './document-read-error';

/** How far before `stream` its dictionary is looked for. */
const DICTIONARY_WINDOW = 4096;

/**
 * Checks what a PDF's compressed streams unpack to, before pdf.js reads it: pdf.js inflates
 * them into typed arrays, which live outside the worker's heap limit, so a Flate bomb would
 * grow the process unchecked. Every stream whose filters start with FlateDecode (possibly
 * behind ASCIIHex or ASCII85) is inflated here with zlib's output bound, all of them together
 * within `maxUnpackedBytes`. Images are skipped: reading text never decodes them. Streams that
 * do not inflate (damaged, encrypted) are left to pdf.js, which fails on them as it would.
 */
export function checkPdfStreams(data: Buffer, maxUnpackedBytes: number): void {
  let remaining = maxUnpackedBytes;
  for (let at = data.indexOf('stream'); at >= 0; at = data.indexOf('stream', at + 6)) {
    if (at >= 3 && data.toString('latin1', at - 3, at) === 'end') continue;
    let start = at + 6;
    if (data[start] === 0x0d) start++;
    if (data[start] === 0x0a) start++;
    if (start === at + 6) continue; // "stream" inside something else, not the keyword
    const filters = streamFilters(dictionaryBefore(data, at));
    if (!filters) continue;
    const endstream = data.indexOf('endstream', start);
    let decoded: Buffer | null = data.subarray(start, endstream < 0 ? data.length : endstream);
    for (const filter of filters) {
      if (filter === 'ASCIIHexDecode' || filter === 'AHx') decoded = asciiHex(decoded);
      else if (filter === 'ASCII85Decode' || filter === 'A85') decoded = ascii85(decoded);
      else if (filter === 'FlateDecode' || filter === 'Fl') {
        decoded = inflateBounded(decoded, remaining, maxUnpackedBytes);
        if (decoded) remaining -= decoded.length;
      } else break; // image codecs and the rest: not what text extraction unpacks
      if (!decoded) break;
    }
  }
}

/** The stream's dictionary: the text since its object began (`N 0 obj`), at most DICTIONARY_WINDOW bytes back. */
function dictionaryBefore(data: Buffer, at: number): string {
  const window = data.toString('latin1', Math.max(0, at - DICTIONARY_WINDOW), at);
  const obj = window.lastIndexOf(' obj');
  return obj >= 0 ? window.slice(obj) : window;
}

/** The filters of a stream that text extraction unpacks, in order; null when none or it is an image. */
function streamFilters(dictionary: string): string[] | null {
  if (/\/Subtype\s*\/Image\b/.test(dictionary)) return null;
  const filter = /\/Filter\s*(\[[^\]]*\]|\/[A-Za-z0-9]+)/.exec(dictionary);
  if (!filter) return null;
  const names = [...filter[1].matchAll(/\/([A-Za-z0-9]+)/g)].map((match) => match[1]);
  return names.some((name) => name === 'FlateDecode' || name === 'Fl') ? names : null;
}

function inflateBounded(data: Buffer, remaining: number, limit: number): Buffer | null {
  try {
    // Sync flush: a truncated stream gives what it has, as pdf.js would read it.
    return inflateSync(data, { maxOutputLength: Math.max(1, remaining), finishFlush: constants.Z_SYNC_FLUSH });
  } catch (error) {
    if (error instanceof RangeError || (error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') {
      throw new DocumentReadError('too_large_unpacked', `it is too large once unpacked (its compressed streams hold over ${megabytes(limit)}).`);
    }
    return null;
  }
}

function asciiHex(data: Buffer): Buffer {
  const text = data.toString('latin1');
  const end = text.indexOf('>');
  let hex = (end < 0 ? text : text.slice(0, end)).replace(/[^0-9A-Fa-f]/g, '');
  if (hex.length % 2) hex += '0';
  return Buffer.from(hex, 'hex');
}

function ascii85(data: Buffer): Buffer {
  const text = data.toString('latin1');
  const end = text.indexOf('~>');
  const body = (end < 0 ? text : text.slice(0, end)).replace(/^<~/, '').replace(/\s+/g, '');
  const out: number[] = [];
  let group: number[] = [];
  const flush = (padding: number) => {
    while (group.length < 5) group.push(84);
    let value = 0;
    for (const digit of group) value = value * 85 + digit;
    const bytes = [(value >>> 24) & 0xff, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff];
    out.push(...bytes.slice(0, 4 - padding));
    group = [];
  };
  for (const char of body) {
    if (char === 'z' && group.length === 0) {
      out.push(0, 0, 0, 0);
      continue;
    }
    const digit = char.charCodeAt(0) - 33;
    if (digit < 0 || digit > 84) continue;
    group.push(digit);
    if (group.length === 5) flush(0);
  }
  if (group.length > 1) flush(5 - group.length);
  return Buffer.from(out);
}
