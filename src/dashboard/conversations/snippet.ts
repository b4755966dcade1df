/**
 * A search snippet as HTML: PostgreSQL's ts_headline marks the matches with `<mark>` but
 * leaves the message text as it was, markup included. Everything is escaped, then only the
 * exact `<mark>` and `</mark>` markers become tags again (a message that contains those words
 * itself gets a highlight at worst, never another tag).
 */
export function snippetHtml(snippet: string): string {
  return snippet
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;')
    .replace(/&lt;(\/?)mark&gt;/g, '<$1mark>');
}
