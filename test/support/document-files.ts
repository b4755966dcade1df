/**
 * Real files for document tests, made in the test: PDFs with pdfkit (one with a text layer,
 * one with only a drawing, as a scan would be), DOCX by zipping WordprocessingML; and hostile
 * files (a DOCX bomb, a PDF Flate bomb, deeply nested HTML) for the readers' limits.
 */
import JSZip from 'jszip';
import { crc32, createDeflate, createDeflateRaw, deflateRawSync } from 'node:zlib';
import PDFDocument from 'pdfkit';

/** A PDF with one page per entry, each page's paragraphs as text. */
export function makePdf(pages: string[][]): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const pdf = new PDFDocument({ autoFirstPage: false, info: { Title: 'Test PDF' } });
    const parts: Buffer[] = [];
    pdf.on('data', (part: Buffer) => parts.push(part));
    pdf.on('end', () => resolve(Buffer.concat(parts)));
    pdf.on('error', reject);
    for (const paragraphs of pages) {
      pdf.addPage();
      for (const paragraph of paragraphs) pdf.fontSize(11).text(paragraph).moveDown();
    }
    pdf.end();
  });
}

/** A PDF with no text layer, like a scanned page: only a filled shape where the picture would be. */
export function makeScannedPdf(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const pdf = new PDFDocument();
    const parts: Buffer[] = [];
    pdf.on('data', (part: Buffer) => parts.push(part));
    pdf.on('end', () => resolve(Buffer.concat(parts)));
    pdf.on('error', reject);
    pdf.rect(100, 100, 200, 200).fill('#336699');
    pdf.end();
  });
}

/** A minimal but complete .docx: content types, the package relationship, and the document part. */
export async function makeDocx(paragraphs: string[]): Promise<Buffer> {
  const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const zip = new JSZip();
  zip.file(
    '[Content_Types].xml',
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' +
      '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">' +
      '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>' +
      '<Default Extension="xml" ContentType="application/xml"/>' +
      '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>' +
      '</Types>',
  );
  zip.file(
    '_rels/.rels',
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' +
      '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">' +
      '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>' +
      '</Relationships>',
  );
  zip.file(
    'word/document.xml',
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' +
      '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>' +
      paragraphs.map((p) => `<w:p><w:r><w:t xml:space="preserve">${escape(p)}</w:t></w:r></w:p>`).join('') +
      '</w:body></w:document>',
  );
  return zip.generateAsync({ type: 'nodebuffer', compression: 'DEFLATE' });
}

const MB = 1024 * 1024;

/**
 * `head`, then `bytes` of `pattern` over and over, then `tail`, deflated as it streams (never
 * all in memory), with its CRC-32 and size.
 */
async function deflateRepeated(
  pattern: string,
  bytes: number,
  format: 'raw' | 'zlib',
  head = '',
  tail = '',
): Promise<{ data: Buffer; crc: number; size: number }> {
  const chunk = Buffer.from(pattern.repeat(Math.ceil(MB / pattern.length)).slice(0, MB));
  const deflate = format === 'raw' ? createDeflateRaw({ level: 9 }) : createDeflate({ level: 9 });
  const parts: Buffer[] = [];
  deflate.on('data', (part: Buffer) => parts.push(part));
  const ended = new Promise<void>((resolve, reject) => deflate.on('end', resolve).on('error', reject));
  let crc = 0;
  const write = async (piece: Buffer) => {
    crc = crc32(piece, crc);
    if (!deflate.write(piece)) await new Promise((resolve) => deflate.once('drain', resolve));
  };
  await write(Buffer.from(head));
  for (let left = bytes; left > 0; left -= chunk.length) await write(left >= chunk.length ? chunk : chunk.subarray(0, left));
  await write(Buffer.from(tail));
  deflate.end();
  await ended;
  return { data: Buffer.concat(parts), crc, size: Buffer.byteLength(head) + bytes + Buffer.byteLength(tail) };
}

interface ZipEntryInput {
  name: string;
  /** Deflated (raw) bytes. */
  data: Buffer;
  crc: number;
  size: number;
  /** The uncompressed size the archive states, when it should lie. */
  declaredSize?: number;
}

/** A ZIP archive of deflated entries, written field by field (so that a test can make it lie). */
function zipArchive(entries: ZipEntryInput[]): Buffer {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const name = Buffer.from(entry.name);
    const size = entry.declaredSize ?? entry.size;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(8, 8);
    local.writeUInt32LE(entry.crc >>> 0, 14);
    local.writeUInt32LE(entry.data.length, 18);
    local.writeUInt32LE(size, 22);
    local.writeUInt16LE(name.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(20, 4);
    central.writeUInt16LE(20, 6);
    central.writeUInt16LE(8, 10);
    central.writeUInt32LE(entry.crc >>> 0, 16);
    central.writeUInt32LE(entry.data.length, 20);
    central.writeUInt32LE(size, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, entry.data);
    centrals.push(central, name);
    offset += local.length + name.length + entry.data.length;
  }
  const directory = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(directory.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, directory, end]);
}

async function zipEntry(name: string, content: string): Promise<ZipEntryInput> {
  const data = Buffer.from(content);
  return { name, data: deflateRawSync(data), crc: crc32(data), size: data.length };
}

/**
 * A DOCX bomb: a well-formed package whose word/document.xml is `unpackedBytes` of XML
 * whitespace around one paragraph (600 MB by default), deflated to well under 1 MB. With
 * `lie`, the archive declares each entry 1 KB, so that only the actual inflating can tell.
 */
export async function makeDocxBomb(options: { unpackedBytes?: number; lie?: boolean } = {}): Promise<Buffer> {
  const unpacked = options.unpackedBytes ?? 600 * MB;
  const head = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>';
  const tail = '<w:p><w:r><w:t>Boom.</w:t></w:r></w:p></w:body></w:document>';
  const body = await deflateRepeated(' ', unpacked, 'raw', head, tail);
  const entries = [
    await zipEntry(
      '[Content_Types].xml',
      '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">' +
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>' +
        '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>',
    ),
    await zipEntry(
      '_rels/.rels',
      '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">' +
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>',
    ),
    { name: 'word/document.xml', data: body.data, crc: body.crc, size: body.size },
  ];
  return zipArchive(options.lie ? entries.map((entry) => ({ ...entry, declaredSize: 1024 })) : entries);
}

/**
 * A PDF whose one page's content stream is `unpackedBytes` of spaces (600 MB by default: a
 * valid, empty content stream), Flate-compressed to well under 1 MB.
 */
export async function makePdfFlateBomb(options: { unpackedBytes?: number } = {}): Promise<Buffer> {
  const content = await deflateRepeated(' ', options.unpackedBytes ?? 600 * MB, 'zlib', 'BT /F1 12 Tf 72 712 Td (Boom.) Tj ET\n');
  const objects: Buffer[] = [
    Buffer.from('<< /Type /Catalog /Pages 2 0 R >>'),
    Buffer.from('<< /Type /Pages /Kids [3 0 R] /Count 1 >>'),
    Buffer.from(
      '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>',
    ),
    Buffer.concat([
      Buffer.from(`<< /Length ${content.data.length} /Filter /FlateDecode >>\nstream\n`),
      content.data,
      Buffer.from('\nendstream'),
    ]),
    Buffer.from('<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>'),
  ];
  const parts: Buffer[] = [Buffer.from('%PDF-1.4\n')];
  const offsets: number[] = [];
  let length = parts[0].length;
  objects.forEach((object, i) => {
    offsets.push(length);
    const framed = Buffer.concat([Buffer.from(`${i + 1} 0 obj\n`), object, Buffer.from('\nendobj\n')]);
    parts.push(framed);
    length += framed.length;
  });
  const xref =
    `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n` +
    offsets.map((offset) => `${String(offset).padStart(10, '0')} 00000 n \n`).join('') +
    `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${length}\n%%EOF\n`;
  parts.push(Buffer.from(xref));
  return Buffer.concat(parts);
}

/** An HTML page of `<div>` opened `depth` times (300,000 by default: 1.5 MB), then one sentence. */
export function makeNestedHtml(depth = 300_000): Buffer {
  return Buffer.from(`<html><body>${'<div>'.repeat(depth)}Deep down.</body></html>`);
}
