// A small, escape-first Markdown renderer for model answers in the playground and transcripts.
// Model text is untrusted: every character of it is HTML-escaped BEFORE any tag is added, and
// the only tags ever produced are the fixed ones below (p, br, strong, em, code, pre, ul, ol,
// li, a). Links keep only http(s) URLs; anything else (javascript:, data:, relative) stays text.
// Supported: paragraphs, **strong**, *em* / _em_, `code`, fenced ``` code blocks (an unclosed
// fence, as mid-stream, shows what has arrived), - / * / 1. lists, # headings (as bold lines,
// so answers do not disturb the page's outline), [text](https://...) links.
// Served as a file (CSP: no inline script); loaded in Node by its unit spec.
(function (root, factory) {
  'use strict';
  if (typeof module === 'object' && module.exports) module.exports = factory();
  else root.SafeMarkdown = factory();
})(typeof self !== 'undefined' ? self : this, function () {
  'use strict';

  var ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, function (c) { return ESCAPES[c]; });
  }

  // **strong**, then *em* and _em_, on text that is already escaped (it holds no '<').
  function emphasis(escaped) {
    return escaped
      .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
      .replace(/(^|[^*\w])\*(?=\S)([^*]*?\S)\*(?![*\w])/g, '$1<em>$2</em>')
      .replace(/(^|[^_\w])_(?=\S)([^_]*?\S)_(?![_\w])/g, '$1<em>$2</em>');
  }

  var LINK = /\[([^\]\n]+)\]\(([^()\s]+)\)/g;

  // Text without code spans: links first (on the raw text, so the URL is checked as written), the rest escaped.
  function textWithLinks(raw) {
    var out = '';
    var last = 0;
    var match;
    LINK.lastIndex = 0;
    while ((match = LINK.exec(raw)) !== null) {
      out += emphasis(escapeHtml(raw.slice(last, match.index)));
      var url = match[2];
      if (/^https?:\/\/[^\s]+$/i.test(url)) {
        out += '<a href="' + escapeHtml(url) + '" rel="noopener noreferrer nofollow" target="_blank">' + emphasis(escapeHtml(match[1])) + '</a>';
      } else {
        // Not http(s): shown as the text it is, never as a link.
        out += emphasis(escapeHtml(match[0]));
      }
      last = match.index + match[0].length;
    }
    return out + emphasis(escapeHtml(raw.slice(last)));
  }

  function inline(raw) {
    var parts = raw.split(/(`[^`\n]+`)/);
    return parts
      .map(function (part, index) {
        if (index % 2 === 1) return '<code>' + escapeHtml(part.slice(1, -1)) + '</code>';
        return textWithLinks(part);
      })
      .join('');
  }

  function render(text) {
    var lines = String(text == null ? '' : text).replace(/\r\n?/g, '\n').split('\n');
    var html = [];
    var paragraph = [];
    var list = null; // { tag: 'ul' | 'ol', items: [] }

    function flushParagraph() {
      if (paragraph.length) html.push('<p>' + paragraph.map(inline).join('<br>') + '</p>');
      paragraph = [];
    }
    function flushList() {
      if (list) html.push('<' + list.tag + '>' + list.items.map(function (item) { return '<li>' + inline(item) + '</li>'; }).join('') + '</' + list.tag + '>');
      list = null;
    }

    for (var i = 0; i < lines.length; i++) {
      var line = lines[i];
      var fence = /^\s*```\s*([\w+#.-]*)\s*$/.exec(line);
      if (fence) {
        flushParagraph();
        flushList();
        var code = [];
        i++;
        while (i < lines.length && !/^\s*```\s*$/.test(lines[i])) code.push(lines[i++]);
        var language = fence[1] ? ' class="language-' + escapeHtml(fence[1]) + '"' : '';
        html.push('<pre><code' + language + '>' + escapeHtml(code.join('\n')) + '</code></pre>');
        continue;
      }
      var bullet = /^\s*[-*+]\s+(.*)$/.exec(line);
      var numbered = /^\s*\d{1,9}[.)]\s+(.*)$/.exec(line);
      if (bullet || numbered) {
        flushParagraph();
        var tag = bullet ? 'ul' : 'ol';
        if (list && list.tag !== tag) flushList();
        if (!list) list = { tag: tag, items: [] };
        list.items.push((bullet || numbered)[1]);
        continue;
      }
      if (/^\s*$/.test(line)) {
        flushParagraph();
        flushList();
        continue;
      }
      var heading = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
      if (heading) {
        flushParagraph();
        flushList();
        html.push('<p><strong>' + inline(heading[1]) + '</strong></p>');
        continue;
      }
      flushList();
      paragraph.push(line);
    }
    flushParagraph();
    flushList();
    return html.join('');
  }

  return { render: render, escapeHtml: escapeHtml };
});
