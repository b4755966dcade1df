import { endianness } from 'node:os';

/**
 * Embedding vectors as OpenAI's wire format carries them: a JSON array of numbers
 * (`encoding_format: "float"`), or the base64 of their little-endian float32 bytes (`"base64"`,
 * the OpenAI SDK's default, which decodes it to the same numbers). Vectors are kept as
 * Float32Array from the upstream on, so that both formats give bit-identical values.
 */

/** On a little-endian machine (every one Node supports but s390x) a Float32Array's memory is the wire's bytes already. */
const LITTLE_ENDIAN = endianness() === 'LE';

/** The base64 of a vector's little-endian float32 bytes. */
export function toBase64(vector: Float32Array): string {
  if (LITTLE_ENDIAN) return Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength).toString('base64');
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i], i * 4);
  return bytes.toString('base64');
}

/** A vector as an upstream sent it: base64 of little-endian float32 bytes, or an array of numbers (rounded to float32). */
export function toVector(embedding: unknown): Float32Array {
  if (typeof embedding === 'string') {
    const bytes = Buffer.from(embedding, 'base64');
    if (bytes.length % 4 !== 0) throw upstreamShape(`a base64 embedding of ${bytes.length} bytes, not a whole number of float32 values`);
    // A copy: the decoded buffer may sit at an offset of Node's pool that a Float32Array cannot start at.
    if (LITTLE_ENDIAN) return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
    const vector = new Float32Array(bytes.length / 4);
    for (let i = 0; i < vector.length; i++) vector[i] = bytes.readFloatLE(i * 4);
    return vector;
  }
  if (Array.isArray(embedding) && embedding.every((value) => typeof value === 'number' && Number.isFinite(value))) {
    return Float32Array.from(embedding as number[]);
  }
  throw upstreamShape('an embedding that is neither base64 nor an array of numbers');
}

/** The vector scaled to length 1 (cosine similarity as a dot product); a zero vector stays as it is. */
export function toUnitLength(vector: Float32Array): Float32Array {
  let sum = 0;
  for (const value of vector) sum += value * value;
  const norm = Math.sqrt(sum);
  return norm > 0 ? Float32Array.from(vector, (value) => value / norm) : vector;
}

/** The numbers of `encoding_format: "float"`: each float32 value as the double it is exactly. */
export function toFloats(vector: Float32Array): number[] {
  return Array.from(vector);
}

/** The upstream answered in a shape we cannot read: a 502 of that deployment (another may answer). */
function upstreamShape(what: string): Error {
  return Object.assign(new Error(`The upstream sent ${what}`), { status: 502 });
}
