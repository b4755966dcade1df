/** Reciprocal rank fusion's constant (Cormack et al., 2009): damps the weight of the very first ranks. */
export const RRF_K = 60;

/** One fused item: its key, its score from 0 to 1, and its rank (from 1) in each ranking, null where absent. */
export interface Fused {
  key: string;
  score: number;
  ranks: Array<number | null>;
}

/**
 * Reciprocal rank fusion of rankings (each a list of keys, best first): an item scores the
 * sum of 1 / (k + rank) over the rankings that have it, divided by what an item first in
 * every ranking would score, so 1 is first everywhere and an item first in one of two
 * rankings scores about 0.5. Best first; ties by the better rank in the earlier ranking.
 */
export function fuseRankings(rankings: string[][], k = RRF_K): Fused[] {
  const fused = new Map<string, Fused>();
  rankings.forEach((ranking, leg) => {
    ranking.forEach((key, i) => {
      let item = fused.get(key);
      if (!item) {
        item = { key, score: 0, ranks: rankings.map(() => null) };
        fused.set(key, item);
      }
      // A key listed twice in one ranking counts at its best rank.
      if (item.ranks[leg] !== null) return;
      item.ranks[leg] = i + 1;
      item.score += 1 / (k + i + 1);
    });
  });
  const best = rankings.length / (k + 1);
  const items = [...fused.values()].map((item) => ({ ...item, score: best > 0 ? item.score / best : 0 }));
  return items.sort((a, b) => b.score - a.score || compareRanks(a.ranks, b.ranks));
}

/** The item ranked better by the first ranking that ranks either; an absent rank is worse than any. */
function compareRanks(a: Array<number | null>, b: Array<number | null>): number {
  for (let leg = 0; leg < a.length; leg++) {
    if (a[leg] === b[leg]) continue;
    return (a[leg] ?? Infinity) - (b[leg] ?? Infinity);
  }
  return 0;
}
