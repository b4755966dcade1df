import type { SearchResult } from './search-provider';

export const MAX_SNIPPET_CHARS = 500;
export const MAX_TITLE_CHARS = 200;

/**
 * Cleans a provider's hits for the model: HTML tags stripped and entities decoded (Brave
 * highlights matches with `<strong>`), whitespace collapsed, titles and snippets trimmed,
 * hits without an http(s) URL and repeated URLs dropped, at most `maxResults` kept.
 */
export function normalizeResults(hits: SearchResult[], maxResults: number): SearchResult[] {
  const results: SearchResult[] = [];
  const seen = new Set<string>();
  for (const hit of hits) {
    if (results.length >= maxResults) break;
    const url = httpUrl(hit.url);
    if (!url || seen.has(url.href)) continue;
    seen.add(url.href);
    results.push({
      title: truncate(plainText(hit.title), MAX_TITLE_CHARS) || url.hostname,
      url: hit.url.trim(),
      snippet: truncate(plainText(hit.snippet), MAX_SNIPPET_CHARS),
    });
  }
  return results;
}

/**
 * Renders results as compact numbered text for a tool message, each with the number the
 * answer cites it by (`numbers`, the request's; 1, 2, ... when not given):
 *
 *   [1] Title
 *       https://example.com/page
 *       Snippet text.
 */
export function formatResultsForModel(results: SearchResult[], numbers?: ReadonlyArray<number | undefined>): string {
  if (results.length === 0) return 'No results found.';
  return results
    .map((result, index) => {
      const number = numbers ? numbers[index] : index + 1;
      const lines = [`${number === undefined ? '-' : `[${number}]`} ${oneLine(result.title) || result.url}`, `    ${result.url}`];
      const snippet = oneLine(result.snippet);
      if (snippet) lines.push(`    ${snippet}`);
      return lines.join('\n');
    })
    .join('\n\n');
}

/** Text without markup: tags removed, entities decoded, control characters and runs of whitespace made single spaces. */
export function plainText(value: string): string {
  return decodeEntities(value.replace(INLINE_TAG, '').replace(OTHER_TAG, ' '))
    .replace(/[\u0000-\u001f\u007f-\u009f\u200b\ufeff]/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

/** Cuts at a word boundary when one is near, marking the cut with an ellipsis. */
export function truncate(value: string, max: number): string {
  if (value.length <= max) return value;
  let cut = value.slice(0, max - 1);
  const space = cut.lastIndexOf(' ');
  if (space >= max * 0.8) cut = cut.slice(0, space);
  // Never leave half of a surrogate pair (an emoji cut in two).
  if (/[\ud800-\udbff]$/.test(cut)) cut = cut.slice(0, -1);
  return `${cut.trimEnd()}…`;
}

function httpUrl(raw: string): URL | undefined {
  const value = raw.trim();
  if (!value) return undefined;
  try {
    const url = new URL(value);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url : undefined;
  } catch {
    return undefined;
  }
}

function oneLine(value: string): string {
  return value.replace(/\s+/g, ' ').trim();
}

// Highlighting tags vanish without a trace (`<strong>Node</strong>.js`); other tags separate words.
const INLINE_TAG = /<\/?(?:strong|b|em|i|u|mark|span|a|code|small|sup|sub|abbr)(?:\s[^<>]*)?>/gi;
const OTHER_TAG = /<\/?[a-z][a-z0-9-]*(?:\s[^<>]*)?\/?>|<!--[\s\S]*?-->/gi;

const NAMED_ENTITIES: Record<string, string> = {
  amp: '&',
  lt: '<',
  gt: '>',
  quot: '"',
  apos: "'",
  nbsp: ' ',
  hellip: '…',
  mdash: '—',
  ndash: '–',
  lsquo: '‘',
  rsquo: '’',
  ldquo: '“',
  rdquo: '”',
  laquo: '«',
  raquo: '»',
  middot: '·',
  copy: '©',
  reg: '®',
  trade: '™',
};

function decodeEntities(value: string): string {
  return value.replace(/&(#x[0-9a-f]{1,6}|#[0-9]{1,7}|[a-z]{2,8});/gi, (entity, name: string) => {
    if (name[0] === '#') {
      const code = name[1] === 'x' || name[1] === 'X' ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
      return code > 0 && code <= 0x10ffff && (code < 0xd800 || code > 0xdfff) ? String.fromCodePoint(code) : entity;
    }
    return NAMED_ENTITIES[name.toLowerCase()] ?? entity;
  });
}
