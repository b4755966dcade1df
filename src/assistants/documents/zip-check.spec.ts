import JSZip from 'jszip';
import { makeDocx, makeDocxBomb } from '../../../test/support/document-files';
import { DocumentReadError } from './document-read-error';
import { checkZipArchive, zipEntries } from './zip-check';

const MB = 1024 * 1024;
const limits = { maxUnpackedBytes: 1 * MB, maxCompressionRatio: 100 };

function refusal(data: Buffer, checked = limits): DocumentReadError {
  try {
    checkZipArchive(data, checked);
  } catch (error) {
    if (error instanceof DocumentReadError) return error;
    throw error;
  }
  throw new Error('the archive was accepted');
}

describe('checkZipArchive', () => {
  it('accepts a real DOCX and reads its directory as written', async () => {
    const docx = await makeDocx(['Hello there.', 'A second paragraph.']);
    expect(() => checkZipArchive(docx, limits)).not.toThrow();
    const files = zipEntries(docx).filter((entry) => !entry.name.endsWith('/'));
    expect(files.map((entry) => entry.name)).toEqual(['[Content_Types].xml', '_rels/.rels', 'word/document.xml']);
  });

  it('refuses an archive whose declared sizes pass the limit, before inflating anything', async () => {
    const bomb = await makeDocxBomb({ unpackedBytes: 5 * MB });
    expect(zipEntries(bomb).reduce((sum, entry) => sum + entry.uncompressedSize, 0)).toBeGreaterThan(5 * MB);
    expect(refusal(bomb)).toMatchObject({ reason: 'too_large_unpacked', message: 'it is too large once unpacked (over 1 MB).' });
  });

  it('refuses a bomb by its ratio even within the size limit', async () => {
    const bomb = await makeDocxBomb({ unpackedBytes: 5 * MB });
    expect(bomb.length * 100).toBeLessThan(5 * MB);
    expect(refusal(bomb, { maxUnpackedBytes: 50 * MB, maxCompressionRatio: 100 }).message).toMatch(/compressed more than 100 to 1/);
  });

  it('bounds the actual inflating when the declared sizes lie', async () => {
    const liar = await makeDocxBomb({ unpackedBytes: 5 * MB, lie: true });
    expect(zipEntries(liar).every((entry) => entry.uncompressedSize === 1024)).toBe(true);
    expect(refusal(liar)).toMatchObject({ reason: 'too_large_unpacked' });
  });

  it('refuses what is not a ZIP archive, or a damaged one, as invalid', async () => {
    expect(refusal(Buffer.from('PK not really a zip at all')).reason).toBe('invalid');
    const docx = await makeDocx(['Hello.']);
    const cut = docx.subarray(0, docx.length - 30);
    expect(refusal(cut).reason).toBe('invalid');
    const zip = new JSZip();
    zip.file('a.txt', 'x'.repeat(1000), { compression: 'DEFLATE' });
    const data = await zip.generateAsync({ type: 'nodebuffer', compression: 'DEFLATE' });
    // Damage the deflated data: the inflate fails rather than the checker.
    const entry = zipEntries(data)[0];
    const start = entry.localHeaderOffset + 30 + data.readUInt16LE(entry.localHeaderOffset + 26);
    data.fill(0xff, start, start + 4);
    expect(refusal(data).reason).toBe('invalid');
  });
});
