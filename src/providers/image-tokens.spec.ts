import { dataUrlImageSize, imageSize, imageTokens, tiledTokens } from './image-tokens';
import { countPromptTokens } from './tokens';

function png(width: number, height: number): Buffer {
  const header = Buffer.alloc(33);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(header, 0);
  header.writeUInt32BE(13, 8);
  header.write('IHDR', 12, 'latin1');
  header.writeUInt32BE(width, 16);
  header.writeUInt32BE(height, 20);
  return Buffer.concat([header, Buffer.alloc(200, 7)]);
}

function gif(width: number, height: number): Buffer {
  const header = Buffer.alloc(13);
  header.write('GIF89a', 0, 'latin1');
  header.writeUInt16LE(width, 6);
  header.writeUInt16LE(height, 8);
  return header;
}

function webp(kind: 'VP8X' | 'VP8L' | 'VP8 ', width: number, height: number): Buffer {
  const b = Buffer.alloc(40);
  b.write('RIFF', 0, 'latin1');
  b.writeUInt32LE(32, 4);
  b.write('WEBP', 8, 'latin1');
  b.write(kind, 12, 'latin1');
  b.writeUInt32LE(20, 16);
  if (kind === 'VP8X') {
    b.writeUIntLE(width - 1, 24, 3);
    b.writeUIntLE(height - 1, 27, 3);
  } else if (kind === 'VP8L') {
    b[20] = 0x2f;
    b.writeUInt32LE(((width - 1) | ((height - 1) << 14)) >>> 0, 21);
  } else {
    Buffer.from([0x9d, 0x01, 0x2a]).copy(b, 23);
    b.writeUInt16LE(width, 26);
    b.writeUInt16LE(height, 28);
  }
  return b;
}

/** A JPEG whose frame header comes after an APP0 and an Exif segment holding a thumbnail's own markers. */
function jpeg(width: number, height: number, exifBytes = 300): Buffer {
  const app0 = Buffer.from([0xff, 0xe0, 0x00, 0x10, ...Buffer.from('JFIF\0'), 1, 1, 0, 0, 1, 0, 1, 0, 0]);
  const exif = Buffer.alloc(4 + exifBytes, 0);
  exif.writeUInt16BE(0xffe1, 0);
  exif.writeUInt16BE(2 + exifBytes, 2);
  // A thumbnail's start-of-frame inside the Exif data must not be taken for the image's.
  Buffer.from([0xff, 0xc0, 0x00, 0x11, 0x08, 0x00, 0x10, 0x00, 0x10]).copy(exif, 10);
  const sof = Buffer.from([0xff, 0xc2, 0x00, 0x11, 0x08, height >> 8, height & 255, width >> 8, width & 255, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
  return Buffer.concat([Buffer.from([0xff, 0xd8]), app0, exif, sof, Buffer.from([0xff, 0xda, 0x00, 0x08]), Buffer.alloc(100, 1)]);
}

const dataUrl = (mime: string, bytes: Buffer) => `data:${mime};base64,${bytes.toString('base64')}`;

describe('imageSize', () => {
  it.each([
    ['PNG', png(1920, 1080)],
    ['GIF', gif(1920, 1080)],
    ['WebP VP8X', webp('VP8X', 1920, 1080)],
    ['WebP VP8L', webp('VP8L', 1920, 1080)],
    ['WebP VP8', webp('VP8 ', 1920, 1080)],
    ['JPEG (progressive, after Exif)', jpeg(1920, 1080)],
  ])('reads %s', (_format, bytes) => {
    expect(imageSize(bytes)).toEqual({ width: 1920, height: 1080 });
  });

  it('knows nothing of other bytes, truncated headers or zero sizes', () => {
    expect(imageSize(Buffer.from('hello, not an image at all'))).toBeUndefined();
    expect(imageSize(png(100, 100).subarray(0, 20))).toBeUndefined();
    expect(imageSize(png(0, 100))).toBeUndefined();
    expect(imageSize(jpeg(100, 100).subarray(0, 40))).toBeUndefined();
    expect(imageSize(Buffer.alloc(0))).toBeUndefined();
  });
});

describe('tiledTokens (OpenAI: fit 2048 x 2048, shortest side 768, 170 a 512-pixel tile plus 85)', () => {
  it.each([
    [1024, 1024, 765], // OpenAI's example: 768 x 768, 4 tiles
    [2048, 4096, 1105], // OpenAI's example: 768 x 1536, 6 tiles
    [100, 100, 255], // small images are not scaled up: one tile
    [512, 512, 255],
    [513, 512, 425],
    [1920, 1080, 1105], // 1365 x 768: 3 x 2 tiles
    [4_000_000_000, 1, 765], // a hostile header: bounded by the scaling, 4 x 1 tiles
  ])('%i x %i: %i tokens', (width, height, tokens) => {
    expect(tiledTokens({ width, height })).toBe(tokens);
  });
});

describe('imageTokens', () => {
  it('counts a data URL by the size in its header, at high and auto detail', () => {
    expect(imageTokens({ url: dataUrl('image/png', png(100, 100)) })).toBe(255);
    expect(imageTokens({ url: dataUrl('image/jpeg', jpeg(2048, 4096)), detail: 'high' })).toBe(1105);
    expect(imageTokens({ url: dataUrl('image/webp', webp('VP8L', 1920, 1080)), detail: 'auto' })).toBe(1105);
  });

  it('counts 85 at low detail whatever the size', () => {
    expect(imageTokens({ url: dataUrl('image/png', png(4096, 4096)), detail: 'low' })).toBe(85);
  });

  it('counts an image of unknown size as 1024 x 1024', () => {
    expect(imageTokens({ url: 'https://example.com/cat.png' })).toBe(765);
    expect(imageTokens({ url: 'data:image/png,not-base64' })).toBe(765);
    expect(imageTokens({ url: dataUrl('image/bmp', Buffer.from('BM not supported')) })).toBe(765);
    expect(imageTokens(undefined)).toBe(765);
  });

  it('decodes only the head of a large data URL', () => {
    // 12 MB of base64 after a PNG header: the size comes from the first bytes only.
    const url = dataUrl('image/png', Buffer.concat([png(300, 200), Buffer.alloc(9_000_000, 3)]));
    expect(dataUrlImageSize(url)).toEqual({ width: 300, height: 200 });
  });

  it('is what countPromptTokens counts for an image part', () => {
    const image = (url: string) => countPromptTokens([{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }]);
    expect(image(dataUrl('image/png', png(100, 100))) - image('https://example.com/cat.png')).toBe(255 - 765);
  });
});
