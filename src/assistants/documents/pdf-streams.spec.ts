import { deflateSync } from 'node:zlib';
import { makePdf, makePdfFlateBomb } from '../../../test/support/document-files';
import { DocumentReadError } from './document-read-error';
import { checkPdfStreams } from './pdf-streams';

const MB = 1024 * 1024;

function streamObject(dictionary: string, data: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`%PDF-1.4\n4 0 obj\n${dictionary}\nstream\n`), data, Buffer.from('\nendstream\nendobj\n')]);
}

describe('checkPdfStreams', () => {
  it('accepts an ordinary PDF', async () => {
    const pdf = await makePdf([['A page of text.'], ['Another.']]);
    expect(() => checkPdfStreams(pdf, MB)).not.toThrow();
  });

  it('refuses a PDF whose Flate streams unpack past the limit, whatever their /Length says', async () => {
    const bomb = await makePdfFlateBomb({ unpackedBytes: 8 * MB });
    expect(bomb.length).toBeLessThan(MB / 10);
    expect(() => checkPdfStreams(bomb, 4 * MB)).toThrow(DocumentReadError);
    expect(() => checkPdfStreams(bomb, 4 * MB)).toThrow('it is too large once unpacked (its compressed streams hold over 4 MB).');
    expect(() => checkPdfStreams(bomb, 16 * MB)).not.toThrow();
  });

  it('counts all streams together, and sees Flate behind ASCIIHex', () => {
    const spaces = deflateSync(Buffer.alloc(3 * MB, ' '));
    const two = Buffer.concat([streamObject('<< /Filter /FlateDecode >>', spaces), streamObject('<< /Filter /FlateDecode >>', spaces)]);
    expect(() => checkPdfStreams(two, 5 * MB)).toThrow(DocumentReadError);
    expect(() => checkPdfStreams(two, 7 * MB)).not.toThrow();
    const hex = streamObject('<< /Filter [/ASCIIHexDecode /FlateDecode] >>', Buffer.from(`${spaces.toString('hex')}>`));
    expect(() => checkPdfStreams(hex, 2 * MB)).toThrow(DocumentReadError);
  });

  it('skips images and streams that do not inflate', () => {
    const spaces = deflateSync(Buffer.alloc(3 * MB, ' '));
    expect(() => checkPdfStreams(streamObject('<< /Subtype /Image /Filter /FlateDecode >>', spaces), MB)).not.toThrow();
    expect(() => checkPdfStreams(streamObject('<< /Filter /FlateDecode >>', Buffer.from('not zlib at all')), MB)).not.toThrow();
  });
});
