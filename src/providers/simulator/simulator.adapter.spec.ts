import { encode } from 'gpt-tokenizer';
import { Cancellation } from '../../common/cancellation';
import type { ModelDefinition } from '../../models/model-catalog';
import type { ChatCompletionChunk, FunctionTool, ProviderRequest } from '../provider-adapter';
import { countTextTokens, PLAIN_TEXT } from '../tokens';
import { SimulatorAdapter, tokenLogprobs } from './simulator.adapter';

describe('tokenLogprobs', () => {
  it('gives one entry per token, shaped as OpenAI does, with plausible probabilities', () => {
    const said = 'Hello wörld 🎉, said the simulator.';
    const entries = tokenLogprobs(said, 5);
    expect(entries).toHaveLength(encode(said, PLAIN_TEXT).length);
    for (const entry of entries) {
      expect(entry.logprob).toBeLessThan(0);
      expect(entry.logprob).toBeGreaterThan(-1);
      expect(entry.bytes).toEqual([...Buffer.from(entry.token, 'utf8')]);
      expect(entry.top_logprobs).toHaveLength(5);
      expect(entry.top_logprobs[0]).toEqual({ token: entry.token, logprob: entry.logprob, bytes: entry.bytes });
      const logprobs = entry.top_logprobs.map((top) => top.logprob);
      expect([...logprobs].sort((a, b) => b - a)).toEqual(logprobs);
      expect(logprobs.reduce((sum, logprob) => sum + Math.exp(logprob), 0)).toBeLessThanOrEqual(1);
    }
    expect(tokenLogprobs(said, 5)).toEqual(entries);
    expect(tokenLogprobs(said, 0).every((entry) => entry.top_logprobs.length === 0)).toBe(true);
  });

  it('scores a long run without spaces in linear time, one entry per token that usage counts', () => {
    // Encoded whole, a run of 100,000 dots takes half a minute (merging is quadratic in a piece's length).
    const dots = '.'.repeat(100_000);
    expect(tokenLogprobs(dots, 0)).toHaveLength(countTextTokens(dots));
  });
});

describe('SimulatorAdapter', () => {
  const simulator = new SimulatorAdapter({ wordDelayMs: 0 });
  const model = { id: 'gpt-4o-mini', provider: 'openai' } as ModelDefinition;
  const weather: FunctionTool = {
    type: 'function',
    function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  };
  const clock: FunctionTool = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };
  const request = (extra: Record<string, unknown>, overrides: Partial<ProviderRequest> = {}): ProviderRequest => ({
    model,
    messages: [{ role: 'user', content: 'What time is it? Use get_time.' }],
    maxTokens: 1_000,
    extra,
    cancellation: new Cancellation(),
    ...overrides,
  });
  const streamed = async (providerRequest: ProviderRequest) => {
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of simulator.stream(providerRequest)) chunks.push(chunk);
    return chunks;
  };

  it('stops streaming with the abort reason once its cancellation aborts', async () => {
    const cancellation = new Cancellation();
    const chunks = simulator.stream(request({}, { cancellation }))[Symbol.asyncIterator]();
    expect((await chunks.next()).done).toBe(false);
    cancellation.abort();
    const error = await chunks.next().catch((caught: unknown) => caught);
    expect((error as Error).name).toBe('AbortError');
  });

  it.each([
    ['auto', undefined, 'get_time'],
    ['required', 'required', 'get_time'],
    ['a named function', { type: 'function', function: { name: 'get_weather' } }, 'get_weather'],
    ['allowed_tools, required', { type: 'allowed_tools', allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: 'get_weather' } }] } }, 'get_weather'],
    ['none', 'none', undefined],
  ])('honours tool_choice %s', async (_name, toolChoice, called) => {
    const completion = await simulator.complete(request({ tool_choice: toolChoice }, { tools: [weather, clock] }));
    expect(completion.choices[0].message.tool_calls?.[0]?.type === 'function' && completion.choices[0].message.tool_calls[0].function.name).toBe(
      called ?? false,
    );
    expect(completion.choices[0].finish_reason).toBe(called ? 'tool_calls' : 'stop');
  });

  it('searches the documents (file_search offered) for a plain question, not for small talk, and answers from the passages', async () => {
    const fileSearch: FunctionTool = {
      type: 'function',
      function: { name: 'file_search', parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] } },
    };
    const asked = (content: string, extra: Record<string, unknown> = {}) =>
      simulator.complete(request(extra, { tools: [weather, fileSearch], messages: [{ role: 'user', content }] }));
    const question = await asked('When is the emergency generator tested?');
    const call = question.choices[0].message.tool_calls?.[0];
    expect(call?.type === 'function' && [call.function.name, JSON.parse(call.function.arguments)]).toEqual([
      'file_search',
      { query: 'When is the emergency generator tested?' },
    ]);
    // Small talk gets the usual echo; a named tool and tool_choice "none" keep their meaning.
    expect((await asked('Hello!')).choices[0].message).toMatchObject({ content: expect.stringContaining('You said: "Hello!"') });
    expect((await asked('What is the weather? get_weather')).choices[0].message.tool_calls?.[0]).toMatchObject({ function: { name: 'get_weather' } });
    expect((await asked('When is the generator tested?', { tool_choice: 'none' })).choices[0].message.tool_calls).toBeUndefined();

    const answer = await simulator.complete(
      request(
        {},
        {
          tools: [weather, fileSearch],
          messages: [
            { role: 'user', content: 'When is the emergency generator tested?' },
            { role: 'assistant', content: null, tool_calls: [{ id: 'fs1', type: 'function', function: { name: 'file_search', arguments: '{}' } }] },
            { role: 'tool', tool_call_id: 'fs1', content: '[1] handbook.pdf, passage 4\nLifts are serviced monthly. The emergency generator is tested every Tuesday.' },
          ],
        },
      ),
    );
    expect(answer.choices[0].message.content).toBe('[simulator] From your documents: The emergency generator is tested every Tuesday. [1] (from handbook.pdf)');
  });

  it('calls the first tool offered when required and none is named, after a tool result too', async () => {
    const completion = await simulator.complete(
      request(
        { tool_choice: 'required' },
        {
          tools: [weather, clock],
          messages: [
            { role: 'user', content: 'Nothing names a tool' },
            { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }] },
            { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
          ],
        },
      ),
    );
    const call = completion.choices[0].message.tool_calls?.[0];
    expect(call?.type === 'function' && JSON.parse(call.function.arguments)).toEqual({ city: 'Nothing names a tool' });
  });

  it('gives n choices and counts every one of them in usage', async () => {
    const one = await simulator.complete(request({}));
    const three = await simulator.complete(request({ n: 3 }));
    expect(three.choices.map((choice) => choice.index)).toEqual([0, 1, 2]);
    expect(three.usage?.completion_tokens).toBe(3 * one.usage!.completion_tokens);
    expect(three.usage?.prompt_tokens).toBe(one.usage?.prompt_tokens);

    const chunks = await streamed(request({ n: 3, logprobs: true, top_logprobs: 1 }));
    const contents = ['', '', ''];
    const logprobs: number[] = [0, 0, 0];
    const finishes: Array<string | null> = [null, null, null];
    for (const chunk of chunks) {
      for (const choice of chunk.choices) {
        contents[choice.index] += choice.delta.content ?? '';
        logprobs[choice.index] += choice.logprobs?.content?.length ?? 0;
        finishes[choice.index] ??= choice.finish_reason;
      }
    }
    expect(contents).toEqual(three.choices.map((choice) => choice.message.content));
    expect(logprobs).toEqual(contents.map((content) => countTextTokens(content)));
    expect(finishes).toEqual(['stop', 'stop', 'stop']);
    expect(chunks[chunks.length - 1].usage).toEqual(three.usage);
  });

  it('cuts at a stop sequence and answers JSON when asked, within max tokens', async () => {
    const stopped = await simulator.complete(request({ stop: ['built-in'] }));
    expect(stopped.choices[0]).toMatchObject({ message: { content: '[simulator] This answer comes from the ' }, finish_reason: 'stop' });
    expect(stopped.usage?.completion_tokens).toBe(countTextTokens('[simulator] This answer comes from the '));

    const json = await simulator.complete(request({ response_format: { type: 'json_object' } }));
    expect(JSON.parse(json.choices[0].message.content!)).toEqual({ answer: expect.stringContaining('simulator') });

    const cut = await simulator.complete(request({ response_format: { type: 'json_object' } }, { maxTokens: 5 }));
    expect(cut.choices[0].finish_reason).toBe('length');
    expect(cut.usage?.completion_tokens).toBe(5);
  });
});
