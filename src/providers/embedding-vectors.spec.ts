import * as path from 'node:path';
import { toBase64, toFloats, toUnitLength, toVector } from './embedding-vectors';

describe('embedding vectors', () => {
  const vector = Float32Array.from([0.1, -0.25, 1e-8, 3.4028234663852886e38, -3.5, 0.333333343267]);

  it('encodes base64 as the little-endian float32 bytes the OpenAI SDK decodes', () => {
    const encoded = toBase64(vector);
    const bytes = Buffer.from(encoded, 'base64');
    expect(bytes).toHaveLength(vector.length * 4);
    // 0.1 as float32 is 0x3dcccccd, little-endian first.
    expect([...bytes.subarray(0, 4)]).toEqual([0xcd, 0xcc, 0xcc, 0x3d]);
    // The SDK's own decoding (openai/internal/utils toFloat32Array) reads the same numbers as the float format.
    const { toFloat32Array } = require(path.join(path.dirname(require.resolve('openai')), 'internal/utils/base64.js')) as { toFloat32Array: (base64: string) => number[] };
    expect(toFloat32Array(encoded)).toEqual(toFloats(vector));
  });

  it('decodes what an upstream sends, base64 or floats, to the same float32 values', () => {
    expect(toVector(toBase64(vector))).toEqual(vector);
    expect(toVector(toFloats(vector))).toEqual(vector);
    // A double from JSON is rounded to float32, as OpenAI's vectors are.
    expect(toVector([0.1])[0]).toBe(Math.fround(0.1));
    // Floats survive JSON exactly: the float format and the base64 format give the same numbers.
    expect(JSON.parse(JSON.stringify(toFloats(vector)))).toEqual(toFloats(toVector(toBase64(vector))));
  });

  it('refuses what is not a vector, as a failure of the upstream (502)', () => {
    expect(() => toVector('AAA')).toThrow(expect.objectContaining({ status: 502 }));
    expect(() => toVector([1, 'x'])).toThrow(expect.objectContaining({ status: 502 }));
    expect(() => toVector(null)).toThrow(expect.objectContaining({ status: 502 }));
  });

  it('scales a vector to unit length, keeping its direction; a zero vector stays zero', () => {
    expect(Array.from(toUnitLength(Float32Array.from([3, 4])))).toEqual([Math.fround(0.6), Math.fround(0.8)]);
    expect(Array.from(toUnitLength(Float32Array.from([0, 0])))).toEqual([0, 0]);
  });
});
