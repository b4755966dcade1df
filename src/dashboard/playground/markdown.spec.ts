/**
 * The playground's Markdown renderer (src/dashboard/assets/markdown.js, a browser asset):
 * what it renders, and that model text never becomes markup of its own.
 */
const { render } = require('../assets/markdown.js') as { render: (text: string) => string };

/** Every tag name the output contains. */
function tagsOf(html: string): string[] {
  return [...html.matchAll(/<\/?([a-zA-Z][\w-]*)/g)].map((match) => match[1].toLowerCase());
}

const ALLOWED_TAGS = new Set(['p', 'br', 'strong', 'em', 'code', 'pre', 'ul', 'ol', 'li', 'a']);

describe('playground Markdown renderer', () => {
  it('renders paragraphs, emphasis, code spans and line breaks', () => {
    expect(render('Hello **world**, *this* is _it_.\nNext line `x < y`\n\nSecond')).toBe(
      '<p>Hello <strong>world</strong>, <em>this</em> is <em>it</em>.<br>Next line <code>x &lt; y</code></p><p>Second</p>',
    );
  });

  it('renders fenced code blocks verbatim and escaped, with their language', () => {
    expect(render('Try:\n```ts\nconst a = "<b>" && 1 * 2 * 3;\n**not bold**\n```\nDone')).toBe(
      '<p>Try:</p><pre><code class="language-ts">const a = &quot;&lt;b&gt;&quot; &amp;&amp; 1 * 2 * 3;\n**not bold**</code></pre><p>Done</p>',
    );
  });

  it('shows an unclosed fence (an answer still streaming) as code so far', () => {
    expect(render('```\nline one\nline')).toBe('<pre><code>line one\nline</code></pre>');
  });

  it('renders bullet and numbered lists, and headings as bold lines', () => {
    expect(render('# Steps\n- one\n- **two**\n\n1. first\n2) second')).toBe(
      '<p><strong>Steps</strong></p><ul><li>one</li><li><strong>two</strong></li></ul><ol><li>first</li><li>second</li></ol>',
    );
  });

  it('links http(s) URLs only, opening safely in a new tab', () => {
    expect(render('See [the docs](https://example.com/a?b=1&c=2).')).toBe(
      '<p>See <a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer nofollow" target="_blank">the docs</a>.</p>',
    );
  });

  describe('hostile model text stays inert', () => {
    const attacks = [
      '<script>alert(1)</script>',
      '<img src=x onerror=alert(1)>',
      '<a href="javascript:alert(1)">x</a>',
      '[click](javascript:alert(1))',
      '[click](JaVaScRiPt:alert(1))',
      '[click](data:text/html;base64,PHNjcmlwdD4=)',
      '[x](https://example.com/"onmouseover="alert(1))',
      '**<svg onload=alert(1)>**',
      '`</code><script>alert(1)</script>`',
      '```\n</code></pre><iframe src="https://evil.example"></iframe>\n```',
      '- <style>body{display:none}</style>',
      '[<img src=x onerror=alert(1)>](https://example.com)',
      '"><script>alert(1)</script>',
    ];

    it.each(attacks)('%s', (attack) => {
      const html = render(attack);
      // Only the renderer's own tags, and never a script, an event handler or a non-http(s) link.
      for (const tag of tagsOf(html)) expect(ALLOWED_TAGS.has(tag)).toBe(true);
      expect(html).not.toMatch(/<script|<img|<svg|<iframe|<style/i);
      expect(html).not.toMatch(/<[^>]*\son\w+\s*=/i);
      expect(html).not.toMatch(/href="(?!https?:\/\/)/i);
      // Attribute values never end early: every quote inside one is escaped.
      for (const [, attributes] of html.matchAll(/<a ([^>]*)>/g)) {
        expect(attributes).toMatch(/^href="[^"]*" rel="noopener noreferrer nofollow" target="_blank"$/);
      }
    });

    it('keeps the text of what it refused to render', () => {
      expect(render('<script>alert(1)</script>')).toBe('<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>');
      expect(render('[click](javascript:alert(1))')).toBe('<p>[click](javascript:alert(1))</p>');
    });
  });
});
