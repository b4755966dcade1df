import { ApiError } from '../../common/errors/api-error';
import { DocumentAttributes, documentsMatching, matchesFilter, parseFileSearchOptions } from './document-filters';

const DOCUMENTS = new Map<string, DocumentAttributes>([
  ['a', { filename: 'Prices 2026.PDF', type: 'application/pdf', uploaded_at: 1_767_300_000 }],
  ['b', { filename: 'returns.md', type: 'text/markdown', uploaded_at: 1_700_000_000 }],
  ['c', { filename: 'faq.txt', type: 'text/plain', uploaded_at: 1_767_400_000 }],
]);

function refusal(value: Record<string, unknown>): { param: string | null; message: string } {
  try {
    parseFileSearchOptions(value, 'tools.0');
  } catch (error) {
    if (error instanceof ApiError) return { param: error.param, message: error.message };
    throw error;
  }
  throw new Error('expected a refusal');
}

describe('file_search options', () => {
  it('keeps what is given, checked: a count, a threshold and the filters (ranker and hybrid_search ignored)', () => {
    const filters = { type: 'eq', key: 'type', value: 'pdf' };
    expect(parseFileSearchOptions({ max_num_results: 50, ranking_options: { ranker: 'auto', score_threshold: 0 }, filters }, 'tools.0')).toEqual({
      max_num_results: 50,
      ranking_options: { score_threshold: 0 },
      filters,
    });
    expect(parseFileSearchOptions({ max_num_results: null, ranking_options: {}, filters: null }, 'tools.0')).toEqual({});
  });

  it.each([
    [{ max_num_results: 0 }, 'tools.0.max_num_results'],
    [{ max_num_results: 2.5 }, 'tools.0.max_num_results'],
    [{ ranking_options: 'high' }, 'tools.0.ranking_options'],
    [{ ranking_options: { score_threshold: 1.01 } }, 'tools.0.ranking_options.score_threshold'],
    [{ filters: [] }, 'tools.0.filters'],
    [{ filters: { type: 'like', key: 'type', value: 'pdf' } }, 'tools.0.filters.type'],
    [{ filters: { type: 'lt', key: 'type', value: 'pdf' } }, 'tools.0.filters.type'],
    [{ filters: { type: 'eq', key: 'author', value: 'me' } }, 'tools.0.filters.key'],
    [{ filters: { type: 'eq', key: 'uploaded_at', value: '2026-01-01' } }, 'tools.0.filters.value'],
    [{ filters: { type: 'in', key: 'filename', value: [] } }, 'tools.0.filters.value'],
    [{ filters: { type: 'or', filters: [{ type: 'eq', key: 'type', value: 'md' }, { type: 'eq', key: 'type', value: 7 }] } }, 'tools.0.filters.filters.1.value'],
  ])('refuses %j naming %s', (value, param) => {
    expect(refusal(value).param).toBe(param);
  });

  it('matches type by MIME type or extension, filename exactly, uploaded_at by number, and compounds', () => {
    const ids = (filter: Record<string, unknown>) => documentsMatching(parseFileSearchOptions({ filters: filter }, 'f').filters!, DOCUMENTS);
    expect(ids({ type: 'eq', key: 'type', value: '.pdf' })).toEqual(['a']);
    expect(ids({ type: 'eq', key: 'type', value: 'text/markdown' })).toEqual(['b']);
    expect(ids({ type: 'nin', key: 'type', value: ['md', 'txt'] })).toEqual(['a']);
    expect(ids({ type: 'eq', key: 'name', value: 'faq.txt' })).toEqual(['c']);
    expect(ids({ type: 'gte', key: 'created_at', value: 1_767_225_600 })).toEqual(['a', 'c']);
    expect(ids({ type: 'and', filters: [{ type: 'gte', key: 'uploaded_at', value: 1_767_225_600 }, { type: 'ne', key: 'type', value: 'pdf' }] })).toEqual(['c']);
    expect(ids({ type: 'or', filters: [{ type: 'eq', key: 'type', value: 'md' }, { type: 'lt', key: 'uploaded_at', value: 0 }] })).toEqual(['b']);
    expect(matchesFilter({ type: 'eq', key: 'uploaded_at', value: 1_700_000_000 }, DOCUMENTS.get('b')!)).toBe(true);
  });
});
