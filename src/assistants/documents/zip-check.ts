import { inflateRawSync } from 'node:zlib';
import { DocumentReadError, megabytes } from './document-read-error';

export interface ZipLimits {
  /** What all the entries together may unpack to, as declared and as actually inflated. */
  maxUnpackedBytes: number;
  /** Unpacked over packed size past which an archive is a bomb, not a document. */
  maxCompressionRatio: number;
}

/** Below this the ratio is not checked: small XML files compress well and harm nobody. */
const RATIO_FLOOR_BYTES = 1024 * 1024;
const EOCD_SIGNATURE = 0x06054b50;
const CENTRAL_SIGNATURE = 0x02014b50;
const LOCAL_SIGNATURE = 0x04034b50;
/** The end record is 22 bytes plus a comment of at most 65535. */
const EOCD_SEARCH = 22 + 0xffff;

export interface ZipEntry {
  name: string;
  method: number;
  compressedSize: number;
  uncompressedSize: number;
  localHeaderOffset: number;
}

function invalid(why: string): DocumentReadError {
  return new DocumentReadError('invalid', `it is not a valid DOCX file (${why}).`);
}

/**
 * The entries of a ZIP archive, from its central directory, without unpacking anything.
 * ZIP64 archives are refused: no document within the upload limit needs one.
 */
export function zipEntries(data: Buffer): ZipEntry[] {
  let eocd = -1;
  for (let i = data.length - 22; i >= Math.max(0, data.length - EOCD_SEARCH); i--) {
    if (data.readUInt32LE(i) === EOCD_SIGNATURE) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw invalid('no ZIP central directory');
  const count = data.readUInt16LE(eocd + 10);
  const directorySize = data.readUInt32LE(eocd + 12);
  const directoryOffset = data.readUInt32LE(eocd + 16);
  if (count === 0xffff || directoryOffset === 0xffffffff || directorySize === 0xffffffff) throw invalid('a ZIP64 archive');
  if (directoryOffset + directorySize > eocd) throw invalid('the ZIP central directory is out of bounds');

  const entries: ZipEntry[] = [];
  let at = directoryOffset;
  for (let i = 0; i < count; i++) {
    if (at + 46 > eocd || data.readUInt32LE(at) !== CENTRAL_SIGNATURE) throw invalid('a damaged ZIP central directory');
    const nameLength = data.readUInt16LE(at + 28);
    const extraLength = data.readUInt16LE(at + 30);
    const commentLength = data.readUInt16LE(at + 32);
    const entry: ZipEntry = {
      name: data.toString('utf8', at + 46, at + 46 + nameLength),
      method: data.readUInt16LE(at + 10),
      compressedSize: data.readUInt32LE(at + 20),
      uncompressedSize: data.readUInt32LE(at + 24),
      localHeaderOffset: data.readUInt32LE(at + 42),
    };
    if (entry.compressedSize === 0xffffffff || entry.uncompressedSize === 0xffffffff || entry.localHeaderOffset === 0xffffffff) {
      throw invalid('a ZIP64 archive');
    }
    entries.push(entry);
    at += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

/**
 * Checks a ZIP archive (a DOCX) before anyone unpacks it: the sizes its central directory
 * declares must stay within the limit and below the bomb ratio; then every entry is inflated,
 * each bounded by its declared size (declared sizes can lie; zlib stops at the bound), so
 * that what a parser later unpacks is known to fit. Throws DocumentReadError.
 */
export function checkZipArchive(data: Buffer, limits: ZipLimits): void {
  const entries = zipEntries(data);
  const declared = entries.reduce((sum, entry) => sum + entry.uncompressedSize, 0);
  const tooLarge = new DocumentReadError('too_large_unpacked', `it is too large once unpacked (over ${megabytes(limits.maxUnpackedBytes)}).`);
  if (declared > limits.maxUnpackedBytes) throw tooLarge;
  if (declared > RATIO_FLOOR_BYTES && declared / data.length > limits.maxCompressionRatio) {
    throw new DocumentReadError(
      'too_large_unpacked',
      `it is too large once unpacked: it is compressed more than ${limits.maxCompressionRatio} to 1, as archive bombs are.`,
    );
  }

  for (const entry of entries) {
    const local = entry.localHeaderOffset;
    if (local + 30 > data.length || data.readUInt32LE(local) !== LOCAL_SIGNATURE) throw invalid(`a damaged entry ${entry.name}`);
    const start = local + 30 + data.readUInt16LE(local + 26) + data.readUInt16LE(local + 28);
    const end = start + entry.compressedSize;
    if (end > data.length) throw invalid(`entry ${entry.name} runs past the end of the file`);
    if (entry.method === 0) {
      if (entry.compressedSize !== entry.uncompressedSize) throw invalid(`entry ${entry.name} has wrong sizes`);
      continue;
    }
    if (entry.method !== 8) throw invalid(`entry ${entry.name} uses a compression method other than deflate`);
    let inflated: Buffer;
    try {
      // One byte more than declared: an entry that reaches it declared less than it holds.
      inflated = inflateRawSync(data.subarray(start, end), { maxOutputLength: entry.uncompressedSize + 1 });
    } catch (error) {
      if (error instanceof RangeError || (error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge;
      throw invalid(`entry ${entry.name} cannot be unpacked`);
    }
    if (inflated.length > entry.uncompressedSize) throw tooLarge;
  }
}
