/**
 * `chars` characters of lowercase "words" of 3 to 10 letters, from a seeded generator: the
 * same text for the same seed, and words that no tokenizer cache has seen (random words are
 * the tokenizer's worst case: it merges them letter by letter).
 */
export function randomWords(chars: number, seed: number): string {
  let state = seed;
  const next = () => {
    state = (state + 0x6d2b79f5) | 0;
    let x = Math.imul(state ^ (state >>> 15), 1 | state);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return (x ^ (x >>> 14)) >>> 0;
  };
  const text = Buffer.alloc(chars, ' ');
  for (let at = 0; at < chars; ) {
    const end = Math.min(chars, at + 3 + (next() % 8));
    while (at < end) text[at++] = 97 + (next() % 26);
    at++;
  }
  return text.toString('latin1');
}
