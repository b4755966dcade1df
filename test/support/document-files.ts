/**
 * Real files for document tests, made in the test: PDFs with pdfkit (one with a text layer,
 * one with only a drawing, as a scan would be), DOCX by zipping WordprocessingML.
 */
import JSZip from 'jszip';
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
