import { cutAtStop, schemaInText, simulatorOptions } from './replies';

describe('simulatorOptions', () => {
  it('reads the fields that change the answer, and treats null or malformed ones as absent', () => {
    expect(
      simulatorOptions({ tool_choice: 'required', response_format: { type: 'json_object' }, stop: 'END', n: 3, logprobs: true, top_logprobs: 2 }),
    ).toEqual({ toolChoice: { mode: 'required' }, responseFormat: { type: 'json_object' }, stop: ['END'], n: 3, topLogprobs: 2 });
    expect(simulatorOptions({ tool_choice: null, response_format: null, stop: null, n: null, logprobs: null, top_logprobs: null })).toEqual({
      toolChoice: { mode: 'auto' },
      responseFormat: { type: 'text' },
      stop: [],
      n: 1,
      topLogprobs: undefined,
    });
    expect(simulatorOptions({ tool_choice: { type: 'function' }, stop: [1, '', 'a'], n: 1.5, logprobs: 'yes', top_logprobs: 5 })).toMatchObject({
      toolChoice: { mode: 'auto' },
      stop: ['a'],
      n: 1,
      topLogprobs: undefined,
    });
    expect(simulatorOptions({ tool_choice: { type: 'function', function: { name: 'f' } }, logprobs: true, top_logprobs: 99 })).toMatchObject({
      toolChoice: { mode: 'required', names: ['f'] },
      topLogprobs: 20,
    });
  });
});

describe('schemaInText', () => {
  it('finds the JSON Schema of an object that a JSON-mode prompt describes, and nothing in prose', () => {
    const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    expect(schemaInText(`Answer as JSON matching {"note": "a {brace} in a string"} no: ${JSON.stringify(schema)} thanks`)).toEqual(schema);
    expect(schemaInText('Reply with {city} filled in, as JSON')).toBeUndefined();
    expect(schemaInText('{"city": "Paris"}')).toBeUndefined();
    expect(schemaInText('{'.repeat(100_000))).toBeUndefined();
  });
});

describe('cutAtStop', () => {
  it('cuts before the earliest of the stop sequences', () => {
    expect(cutAtStop('one, two. three', ['.', ','])).toBe('one');
    expect(cutAtStop('no stop here', ['END'])).toBe('no stop here');
  });
});
