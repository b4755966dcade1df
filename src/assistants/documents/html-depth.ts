import { DocumentReadError } from './document-read-error';

/** Deeper than any page a person writes; html-to-text's work grows with depth times size. */
export const MAX_HTML_DEPTH = 256;

/** Elements that never hold others. */
const VOID = new Set(['area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'param', 'source', 'track', 'wbr']);
/**
 * Elements an HTML parser closes by itself when a sibling starts (`<p>a<p>b`, `<li>`):
 * pages often leave them open, so they are not counted as nesting.
 */
const SELF_CLOSING = new Set(['p', 'li', 'dt', 'dd', 'tr', 'td', 'th', 'thead', 'tbody', 'tfoot', 'option', 'optgroup', 'rb', 'rt', 'rp']);
/** Their content is text up to their end tag, not markup. */
const RAW_TEXT = new Set(['script', 'style', 'textarea', 'title', 'xmp', 'noscript']);

/**
 * How deeply the elements of an HTML page nest, in one pass over its tags without building
 * anything; stops as soon as `limit` is passed (returning limit + 1). End tags close up to
 * their open element, as a parser would; stray end tags are ignored.
 */
export function htmlNestingDepth(html: string, limit = MAX_HTML_DEPTH): number {
  const open: string[] = [];
  let deepest = 0;
  const tag = /<(\/?)([a-zA-Z][a-zA-Z0-9:-]*)[^>]*>|<!--|<!\[CDATA\[/g;
  for (let match = tag.exec(html); match; match = tag.exec(html)) {
    if (match[0] === '<!--' || match[0] === '<![CDATA[') {
      const end = html.indexOf(match[0] === '<!--' ? '-->' : ']]>', tag.lastIndex);
      if (end < 0) break;
      tag.lastIndex = end + 3;
      continue;
    }
    const name = match[2].toLowerCase();
    if (match[1]) {
      const at = open.lastIndexOf(name);
      if (at >= 0) open.length = at;
      continue;
    }
    if (VOID.has(name) || SELF_CLOSING.has(name)) continue;
    if (RAW_TEXT.has(name)) {
      const close = new RegExp(`</${name}`, 'gi');
      close.lastIndex = tag.lastIndex;
      const end = close.exec(html);
      if (!end) break;
      tag.lastIndex = end.index;
      continue;
    }
    open.push(name);
    if (open.length > deepest) deepest = open.length;
    if (deepest > limit) return deepest;
  }
  return deepest;
}

/** Refuses a page nested deeper than `limit`, before a parser spends seconds on it. */
export function checkHtmlDepth(html: string, limit = MAX_HTML_DEPTH): void {
  if (htmlNestingDepth(html, limit) > limit) {
    throw new DocumentReadError('too_deep', `its HTML is nested more than ${limit} levels deep.`);
  }
}
