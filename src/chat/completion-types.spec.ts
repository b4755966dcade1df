import { withOurFields } from './completion-types';
import { sameHiddenClass } from '../../test/support/hidden-class';

const upstream = (index: number) =>
  JSON.parse(`{"id":"chatcmpl-${index}","object":"chat.completion","created":${index},"model":"gpt-4o-mini-2024-07-18","choices":[],"usage":null,"system_fingerprint":"fp"}`) as {
    id: string;
    model: string;
  };

describe('withOurFields', () => {
  it("keeps the upstream's fields in their order, ours replacing theirs or after them", () => {
    const answer = withOurFields(upstream(1), { model: 'gpt-4o-mini', x_service: { cost_millicents: 1 } });
    expect(Object.entries(answer)).toEqual([
      ['id', 'chatcmpl-1'],
      ['object', 'chat.completion'],
      ['created', 1],
      ['model', 'gpt-4o-mini'],
      ['choices', []],
      ['usage', null],
      ['system_fingerprint', 'fp'],
      ['x_service', { cost_millicents: 1 }],
    ]);
  });

  it('makes every answer with one hidden class, once warm (a spread followed by a new field made a new one each time)', () => {
    const answers = Array.from({ length: 200 }, (_, index) => withOurFields(upstream(index), { model: 'gpt-4o-mini', x_service: index }));
    expect(sameHiddenClass(answers[150], answers[199])).toBe(true);
  });
});
