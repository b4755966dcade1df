import { fuseRankings, RRF_K } from './rank-fusion';

describe('fuseRankings (reciprocal rank fusion)', () => {
  it('scores 1 / (k + rank) summed over the rankings, scaled so that first everywhere is 1', () => {
    const fused = fuseRankings([
      ['a', 'b', 'c'],
      ['a', 'c'],
    ]);
    expect(fused.map((f) => f.key)).toEqual(['a', 'c', 'b']);
    const scale = 2 / (RRF_K + 1);
    expect(fused[0].score).toBeCloseTo(1, 12);
    expect(fused[1].score).toBeCloseTo((1 / (RRF_K + 3) + 1 / (RRF_K + 2)) / scale, 12);
    expect(fused[2].score).toBeCloseTo(1 / (RRF_K + 2) / scale, 12);
    expect(fused.map((f) => f.ranks)).toEqual([
      [1, 1],
      [3, 2],
      [2, null],
    ]);
  });

  it('an item found by both rankings beats one ranked first by only one', () => {
    const fused = fuseRankings([
      ['lexical-only', 'both'],
      ['dense-only', 'both'],
    ]);
    expect(fused[0].key).toBe('both');
    // First in one of two rankings: about half.
    expect(fused[1].score).toBeCloseTo(0.5, 12);
  });

  it('breaks ties by the earlier ranking, and counts a repeated key once, at its best rank', () => {
    const fused = fuseRankings([
      ['x', 'y', 'x'],
      ['y', 'x'],
    ]);
    expect(fused.map((f) => f.key)).toEqual(['x', 'y']);
    expect(fused[0].score).toBe(fused[1].score);
    expect(fused[0].ranks).toEqual([1, 2]);
  });

  it('keeps every score within 0 and 1; no rankings, nothing', () => {
    expect(fuseRankings([])).toEqual([]);
    expect(fuseRankings([[], []])).toEqual([]);
    const fused = fuseRankings([Array.from({ length: 50 }, (_, i) => `l${i}`), Array.from({ length: 50 }, (_, i) => `d${i}`)]);
    for (const f of fused) {
      expect(f.score).toBeGreaterThan(0);
      expect(f.score).toBeLessThanOrEqual(1);
    }
  });
});
