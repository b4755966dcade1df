import { DocumentReadError } from './document-read-error';
import { checkHtmlDepth, htmlNestingDepth, MAX_HTML_DEPTH } from './html-depth';

describe('htmlNestingDepth', () => {
  it('counts how deeply elements nest, closing them as a parser would', () => {
    expect(htmlNestingDepth('<html><body><div><p>Hi</p></div></body></html>')).toBe(3);
    expect(htmlNestingDepth('<div><span>a</span><span>b</span></div>')).toBe(2);
    // An end tag closes everything opened inside its element; a stray one changes nothing.
    expect(htmlNestingDepth('<div><b><i>x</div><div>y</div></span>')).toBe(3);
  });

  it('does not count elements that never nest or close themselves, nor tags in comments or scripts', () => {
    const page = `<ul>${'<li>item<br>'.repeat(1000)}</ul>${'<p>para'.repeat(1000)}<img src=x><!-- ${'<div>'.repeat(1000)} -->`;
    expect(htmlNestingDepth(page)).toBe(1);
    expect(htmlNestingDepth(`<script>${'<div>'.repeat(1000)}</script><style>${'<b>'.repeat(500)}</STYLE><div></div>`)).toBe(1);
  });

  it('stops as soon as the limit is passed', () => {
    expect(htmlNestingDepth('<div>'.repeat(300_000), 256)).toBe(257);
    expect(htmlNestingDepth('<div>'.repeat(256) + '</div>'.repeat(256), 256)).toBe(256);
  });
});

describe('checkHtmlDepth', () => {
  it('refuses a page nested deeper than the limit with the reason', () => {
    let refusal: unknown;
    try {
      checkHtmlDepth(`<html><body>${'<div>'.repeat(400_000)}deep</body></html>`);
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toBeInstanceOf(DocumentReadError);
    expect(refusal).toMatchObject({ reason: 'too_deep', message: `its HTML is nested more than ${MAX_HTML_DEPTH} levels deep.` });
  });

  it('lets a page at the limit through', () => {
    expect(() => checkHtmlDepth('<div>'.repeat(MAX_HTML_DEPTH) + 'ok')).not.toThrow();
  });
});
