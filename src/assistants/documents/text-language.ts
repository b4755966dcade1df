/**
 * The language of a document's text, as one of PostgreSQL's text search configurations: its
 * chunks are indexed (stemming, stop words) with it, and queries are parsed with it too.
 * `simple` (no stemming, no stop words) when the text is in none of them, or too short to say.
 */
export const TEXT_LANGUAGES = ['simple', 'english', 'french', 'german', 'spanish', 'italian', 'portuguese', 'dutch'] as const;
export type TextLanguage = (typeof TEXT_LANGUAGES)[number];

/**
 * Common function words of each language, few of them common in another of the list (`de`,
 * `la`, `en`, `que`, shared by several, are left out): counted in a text, they say which
 * language it is in, since function words are a fifth or more of the words of any prose.
 */
const MARKERS: Record<Exclude<TextLanguage, 'simple'>, string[]> = {
  english: 'the and of to is that for with on as are was this be by it from or have not which you'.split(' '),
  french: 'le les des du est une et pour dans qui pas sur au avec ce sont par aux vous nous'.split(' '),
  german: 'der die und das ist nicht mit den sich auf ein eine dem zu im für von auch wird werden'.split(' '),
  spanish: 'el los las y por al lo más pero sus su está este esta son también muy hay sin'.split(' '),
  italian: 'il di che è gli della sono non nel alla anche questo degli sul dei delle nella essere'.split(' '),
  portuguese: 'o os das dos não um uma em ao mais pelo pela são também foi isso seu sua'.split(' '),
  dutch: 'het een van en dat op te zijn voor niet met ook aan bij worden wordt deze naar'.split(' '),
};

const LANGUAGE_OF_WORD = new Map<string, Array<Exclude<TextLanguage, 'simple'>>>();
for (const [language, words] of Object.entries(MARKERS) as Array<[Exclude<TextLanguage, 'simple'>, string[]]>) {
  for (const word of words) LANGUAGE_OF_WORD.set(word, [...(LANGUAGE_OF_WORD.get(word) ?? []), language]);
}

/** Words looked at: the start of a long document says as much as all of it. */
const SAMPLE_WORDS = 5_000;
/** Below this many words a text says too little (a title, a table of numbers). */
const MIN_WORDS = 8;
/** The winner's markers must be at least this share of the words... */
const MIN_SHARE = 0.05;
/** ...and this many times the runner-up's. */
const MIN_LEAD = 1.5;

export function detectTextLanguage(text: string): TextLanguage {
  const words = (text.toLowerCase().match(/\p{L}+/gu) ?? []).slice(0, SAMPLE_WORDS);
  if (words.length < MIN_WORDS) return 'simple';
  const counts = new Map<TextLanguage, number>();
  for (const word of words) {
    for (const language of LANGUAGE_OF_WORD.get(word) ?? []) counts.set(language, (counts.get(language) ?? 0) + 1);
  }
  const [first, second] = [...counts.entries()].sort((a, b) => b[1] - a[1]);
  if (!first || first[1] < words.length * MIN_SHARE) return 'simple';
  if (second && first[1] < second[1] * MIN_LEAD) return 'simple';
  return first[0];
}

export function isTextLanguage(value: unknown): value is TextLanguage {
  return typeof value === 'string' && (TEXT_LANGUAGES as readonly string[]).includes(value);
}
