import { decodeVector, encodeVector, VectorCache, VectorIndex } from './dense-search';

function row(id: number, document: string, vector: number[]) {
  return { id: String(id), document_id: document, position: id, embedding: encodeVector(Float32Array.from(vector)) };
}

describe('dense search', () => {
  it('stores vectors as little-endian float32 and reads them back bit for bit', () => {
    const vector = Float32Array.from([0.1, -2.5, 3e-8, 1]);
    const bytes = encodeVector(vector);
    expect(bytes.length).toBe(16);
    expect(bytes.readFloatLE(4)).toBe(vector[1]);
    expect(decodeVector(bytes)).toEqual(vector);
  });

  it('finds the most similar vectors by cosine, exactly, best first, within documents when asked', () => {
    const index = VectorIndex.of([row(1, 'd1', [1, 0, 0]), row(2, 'd1', [0, 5, 0]), row(3, 'd2', [3, 3, 0]), row(4, 'd2', [0, 0, -1])]);
    const hits = index.search(Float32Array.from([2, 1, 0]), 3);
    expect(hits.map((h) => h.chunkId)).toEqual(['3', '1', '2']);
    expect(hits[0].similarity).toBeCloseTo(3 / Math.sqrt(10), 6);
    expect(index.search(Float32Array.from([2, 1, 0]), 2, new Set(['d1'])).map((h) => h.chunkId)).toEqual(['1', '2']);
    // A query of another size finds nothing rather than garbage.
    expect(index.search(Float32Array.from([1, 0]), 3)).toEqual([]);
  });

  it('agrees with a brute-force sort over random vectors', () => {
    let seed = 7;
    const random = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
    const rows = Array.from({ length: 500 }, (_, i) => row(i, `d${i % 7}`, Array.from({ length: 16 }, random)));
    const index = VectorIndex.of(rows);
    const query = Float32Array.from({ length: 16 }, random);
    const cos = (v: Float32Array) => {
      let dot = 0, nq = 0, nv = 0;
      for (let i = 0; i < v.length; i++) { dot += v[i] * query[i]; nq += query[i] ** 2; nv += v[i] ** 2; }
      return dot / Math.sqrt(nq * nv);
    };
    const expected = rows.map((r) => ({ id: r.id, s: cos(decodeVector(r.embedding)) })).sort((a, b) => b.s - a.s).slice(0, 20);
    expect(index.search(query, 20).map((h) => h.chunkId)).toEqual(expected.map((e) => e.id));
  });

  it('caches an index per assistant for its generation and model, within the byte budget', () => {
    const small = VectorIndex.of([row(1, 'd', [1, 0])]);
    const cache = new VectorCache(small.bytes * 2);
    cache.put('a1', '1', 'm', small);
    expect(cache.get('a1', '1', 'm')).toBe(small);
    expect(cache.get('a1', '2', 'm')).toBeUndefined();
    expect(cache.get('a1', '1', 'other')).toBeUndefined();
    cache.put('a2', '1', 'm', VectorIndex.of([row(2, 'd', [0, 1])]));
    cache.get('a1', '1', 'm');
    // a2 is the least recently used: it goes for a3.
    cache.put('a3', '1', 'm', VectorIndex.of([row(3, 'd', [1, 1])]));
    expect(cache.get('a2', '1', 'm')).toBeUndefined();
    expect(cache.get('a1', '1', 'm')).toBe(small);
    expect(cache.usedBytes).toBe(small.bytes * 2);
  });
});
