import { snippetHtml } from './snippet';

describe('search snippets as HTML', () => {
  it('keeps the highlights and escapes everything else', () => {
    expect(snippetHtml('the <mark>refund</mark> policy & <b>terms</b>')).toBe('the <mark>refund</mark> policy &amp; &lt;b&gt;terms&lt;/b&gt;');
  });

  it('never lets message text become a tag or an attribute', () => {
    const html = snippetHtml('<mark>x</mark> <script>alert(1)</script> <img src=x onerror="alert(1)"> <mark onclick=1>');
    expect(html).toBe('<mark>x</mark> &lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=&quot;alert(1)&quot;&gt; &lt;mark onclick=1&gt;');
    expect(html.match(/<(\/?)(\w+)/g)).toEqual(['<mark', '</mark']);
  });
});
