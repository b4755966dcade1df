/**
 * Prompt tokens of an `image_url` part, by OpenAI's published formula: 85 at `detail: low`;
 * otherwise 85 plus 170 per 512-pixel tile, after the image is scaled down to fit in
 * 2048 x 2048 and then so that its shortest side is at most 768. The size is read from the
 * header of a `data:` URL (PNG, JPEG, GIF, WebP); an image whose size is not known here
 * (a remote URL, another format) counts as a 1024 x 1024 one, 765 tokens.
 */
export function imageTokens(image: { url?: unknown; detail?: unknown } | undefined): number {
  if (image?.detail === 'low') return BASE_TOKENS;
  const size = typeof image?.url === 'string' ? dataUrlImageSize(image.url) : undefined;
  return tiledTokens(size ?? { width: 1024, height: 1024 });
}

const BASE_TOKENS = 85;
const TOKENS_PER_TILE = 170;
const TILE = 512;
const MAX_SIDE = 2048;
const MAX_SHORT_SIDE = 768;

export interface ImageSize {
  width: number;
  height: number;
}

export function tiledTokens({ width, height }: ImageSize): number {
  // Fit in 2048 x 2048, then the shortest side to 768 at most; never scaled up.
  const fit = Math.min(1, MAX_SIDE / Math.max(width, height));
  const scale = fit * Math.min(1, MAX_SHORT_SIDE / (Math.min(width, height) * fit));
  // The epsilon keeps 1536.0000001 pixels at 3 tiles.
  const tiles = (side: number) => Math.max(1, Math.ceil((side * scale) / TILE - 1e-9));
  return BASE_TOKENS + TOKENS_PER_TILE * tiles(width) * tiles(height);
}

/**
 * Base64 characters decoded from the start of a data URL: enough for any header but a JPEG
 * whose metadata runs longer (it then counts as 1024 x 1024). Never the whole image.
 */
const HEAD_BASE64_CHARS = 96 * 1024;

export function dataUrlImageSize(url: string): ImageSize | undefined {
  const comma = url.indexOf(',');
  if (!/^data:/i.test(url) || comma < 0 || comma > 256) return undefined;
  if (!/;\s*base64\s*$/i.test(url.slice(0, comma))) return undefined;
  return imageSize(Buffer.from(url.slice(comma + 1, comma + 1 + HEAD_BASE64_CHARS), 'base64'));
}

/** Width and height from the first bytes of a PNG, GIF, WebP or JPEG file. */
export function imageSize(bytes: Buffer): ImageSize | undefined {
  const size = pngSize(bytes) ?? gifSize(bytes) ?? webpSize(bytes) ?? jpegSize(bytes);
  return size && size.width > 0 && size.height > 0 ? size : undefined;
}

function pngSize(b: Buffer): ImageSize | undefined {
  // Signature, then the IHDR chunk: length, "IHDR", width, height (big-endian).
  if (b.length < 24 || b.readUInt32BE(0) !== 0x89504e47 || b.toString('latin1', 12, 16) !== 'IHDR') return undefined;
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
}

function gifSize(b: Buffer): ImageSize | undefined {
  if (b.length < 10 || !/^GIF8[79]a$/.test(b.toString('latin1', 0, 6))) return undefined;
  return { width: b.readUInt16LE(6), height: b.readUInt16LE(8) };
}

function webpSize(b: Buffer): ImageSize | undefined {
  if (b.length < 30 || b.toString('latin1', 0, 4) !== 'RIFF' || b.toString('latin1', 8, 12) !== 'WEBP') return undefined;
  switch (b.toString('latin1', 12, 16)) {
    case 'VP8X': // extended: 24-bit width - 1 and height - 1
      return { width: 1 + b.readUIntLE(24, 3), height: 1 + b.readUIntLE(27, 3) };
    case 'VP8L': // lossless: 14 bits each, after the 0x2f signature
      if (b[20] !== 0x2f) return undefined;
      return { width: 1 + (b.readUInt16LE(21) & 0x3fff), height: 1 + ((b.readUInt32LE(21) >>> 14) & 0x3fff) };
    case 'VP8 ': // lossy: after the frame tag and start code
      return { width: b.readUInt16LE(26) & 0x3fff, height: b.readUInt16LE(28) & 0x3fff };
    default:
      return undefined;
  }
}

/** Walks the JPEG segments to the first start-of-frame marker, which holds the size. */
function jpegSize(b: Buffer): ImageSize | undefined {
  if (b.length < 4 || b[0] !== 0xff || b[1] !== 0xd8) return undefined;
  let at = 2;
  while (at + 9 <= b.length) {
    if (b[at] !== 0xff) return undefined;
    const marker = b[at + 1];
    if (marker === 0xff) {
      at++; // fill byte
      continue;
    }
    // SOF0-SOF15, except DHT (C4), JPG (C8) and DAC (CC).
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      return { width: b.readUInt16BE(at + 7), height: b.readUInt16BE(at + 5) };
    }
    if (marker === 0xd9 || marker === 0xda) return undefined; // end of image, or scan data before any frame
    at += 2 + b.readUInt16BE(at + 2);
  }
  return undefined;
}
