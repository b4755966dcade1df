import { citationsIn, MAX_ANNOTATIONS, responseAnnotationOf, SourceList } from './citations';

describe('citations', () => {
  const sources = () => {
    const list = new SourceList();
    list.add({ type: 'url', url: 'https://a.example/', title: 'A' });
    list.add({ type: 'file', file_id: 'doc-1', filename: 'policy.md', score: 0.9, text: 'Returns within 30 days.', attributes: {} });
    return list;
  };

  it('numbers sources once: the same page or passage found again keeps its number', () => {
    const list = sources();
    expect(list.add({ type: 'url', url: 'https://a.example/', title: 'A again' })?.number).toBe(1);
    expect(list.add({ type: 'url', url: 'https://b.example/', title: 'B' })?.number).toBe(3);
    expect(list.size).toBe(3);
  });

  it("maps [n], [n, m], [^n] and 【n†source】 markers to the request's sources, at the marker's span", () => {
    const text = 'Returns are free [2]. See A [1, 2], or 【1†source】 and [^2].';
    const annotations = citationsIn(text, sources());
    expect(annotations).toHaveLength(5);
    for (const annotation of annotations) {
      const span = annotation.type === 'url_citation' ? annotation.url_citation : annotation.file_citation;
      expect(span.start_index).toBeGreaterThanOrEqual(0);
      expect(span.end_index).toBeLessThanOrEqual(text.length);
      expect(text.slice(span.start_index, span.end_index)).toMatch(/^(\[\^?[\d, ]+\]|【1†source】)$/);
    }
    expect(annotations[0]).toEqual({
      type: 'file_citation',
      file_citation: { file_id: 'doc-1', filename: 'policy.md', index: 17, start_index: 17, end_index: 20 },
    });
    expect(annotations[1]).toEqual({ type: 'url_citation', url_citation: { start_index: 28, end_index: 34, url: 'https://a.example/', title: 'A' } });
    expect(responseAnnotationOf(annotations[0])).toEqual({ type: 'file_citation', file_id: 'doc-1', filename: 'policy.md', index: 17 });
    expect(responseAnnotationOf(annotations[1])).toEqual({ type: 'url_citation', url: 'https://a.example/', title: 'A', start_index: 28, end_index: 34 });
  });

  it('ignores numbers that name no source, years, links and text without sources', () => {
    expect(citationsIn('In [2024] and [7] and [0].', sources())).toEqual([]);
    expect(citationsIn('Cited [1].', new SourceList())).toEqual([]);
  });

  it('stops at MAX_ANNOTATIONS', () => {
    expect(citationsIn('[1]'.repeat(MAX_ANNOTATIONS + 10), sources())).toHaveLength(MAX_ANNOTATIONS);
  });
});
