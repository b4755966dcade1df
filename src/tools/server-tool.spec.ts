import { queryArgument, ToolArgumentsError } from './server-tool';

describe('queryArgument', () => {
  it('reads and trims the query', () => {
    expect(queryArgument('{"query": "  node release  "}', 'web_search')).toBe('node release');
  });

  it.each([['{}'], [''], ['{"query": ""}'], ['{"query": "   "}'], ['{"query": 42}'], ['null'], ['"text"'], ['{not json']])(
    'refuses %s, telling the model the form',
    (args) => {
      const attempt = () => queryArgument(args, 'file_search');
      expect(attempt).toThrow(ToolArgumentsError);
      expect(attempt).toThrow('file_search needs arguments of the form {"query": "..."}.');
    },
  );
});
