import { Cancellation } from '../common/cancellation';
import { toJsonSchema } from '@langchain/core/utils/json_schema';
import { zodSchema } from 'ai';
import { encode } from 'gpt-tokenizer';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import type { ModelDefinition } from '../models/model-catalog';
import type { ChatCompletionChunk, FunctionTool, ProviderRequest } from './provider-adapter';
import { cutAtStop, schemaInText, SimulatorAdapter, simulatorOptions, tokenLogprobs, valueForSchema } from './simulator.adapter';
import { countTextTokens, PLAIN_TEXT } from './tokens';

const text = (key: string | undefined) => `simulated ${key ?? 'text'}`;

/** Shapes clients send: nested objects, enums, arrays of objects, nullables, formats, bounds, unions, tuples, records. */
const Order = z.object({
  id: z.string().uuid(),
  customer: z.object({ name: z.string().min(2).max(8), email: z.string().email(), vip: z.boolean() }),
  status: z.enum(['open', 'shipped', 'closed']),
  kind: z.literal('order'),
  placed_at: z.string().datetime(),
  items: z
    .array(z.object({ sku: z.string(), quantity: z.number().int().min(1).max(99), price: z.number().positive().multipleOf(0.5) }))
    .min(2),
  note: z.string().nullable(),
  discount: z.number().min(10).max(20).nullable(),
  tags: z.array(z.string()).min(3).max(3),
  coordinates: z.tuple([z.number().max(-5), z.number().gt(100)]),
  shipping: z.discriminatedUnion('method', [
    z.object({ method: z.literal('post'), days: z.number().int().lt(0) }),
    z.object({ method: z.literal('pickup'), store: z.string() }),
  ]),
  attributes: z.record(z.string(), z.number()),
  score: z.union([z.number().int().gte(1000), z.string()]),
});

describe('valueForSchema', () => {
  it.each([
    ["openai's zodResponseFormat (what .parse() sends)", () => zodResponseFormat(Order, 'order').json_schema.schema],
    ["LangChain's toJsonSchema (withStructuredOutput)", () => toJsonSchema(Order)],
    // Called untyped: the AI SDK's inference over this schema is deeper than TypeScript allows.
    ["the AI SDK's zodSchema (generateObject)", () => (zodSchema as (schema: unknown) => { jsonSchema: unknown })(Order).jsonSchema],
  ])('generates a value valid against the schema from %s', (_source, schemaOf) => {
    const schema = schemaOf();
    const value = valueForSchema(schema, { text });
    const parsed = Order.safeParse(value);
    expect(parsed.error?.issues ?? []).toEqual([]);
  });

  it('answers the draft-07 shape with additionalProperties false with exactly the listed properties', () => {
    const schema = {
      type: 'object',
      properties: { city: { type: 'string', description: 'The city' }, temperature_c: { type: 'number' }, rain: { type: ['boolean', 'null'] } },
      required: ['city', 'temperature_c'],
      additionalProperties: false,
      $schema: 'http://json-schema.org/draft-07/schema#',
    };
    expect(valueForSchema(schema, { text })).toEqual({ city: 'simulated city', temperature_c: 1, rain: true });
  });

  it('follows local $refs and stops on recursive schemas', () => {
    const tree = {
      $ref: '#/definitions/node',
      definitions: {
        node: {
          type: 'object',
          properties: { label: { type: 'string' }, children: { type: 'array', items: { $ref: '#/definitions/node' }, minItems: 1 } },
          required: ['label', 'children'],
          additionalProperties: false,
        },
      },
    };
    const value = valueForSchema(tree, { text }) as { label: string; children: unknown[] };
    expect(value.label).toBe('simulated label');
    expect(Array.isArray(value.children)).toBe(true);
    expect(JSON.stringify(value).length).toBeLessThan(100_000);
  });

  it('stays small and safe on hostile schemas', () => {
    const huge = { type: 'array', minItems: 1e9, items: { type: 'array', minItems: 1e9, items: { type: 'string', minLength: 1e9 } } };
    expect((valueForSchema(huge, { text }) as unknown[]).flat().length).toBeLessThanOrEqual(5_000);
    expect(JSON.stringify(valueForSchema(huge, { text })).length).toBeLessThan(300_000);
    // Parsed, as a request body is: a literal `__proto__` key would set the prototype instead.
    const proto = valueForSchema(JSON.parse('{"type": "object", "properties": {"__proto__": {"type": "string"}}, "required": ["constructor"]}'), { text });
    expect(Object.getPrototypeOf(proto)).toBe(Object.prototype);
    expect(JSON.stringify(proto)).toBe('{"__proto__":"simulated __proto__","constructor":"simulated constructor"}');
    const malformed = [null, true, false, 7, 'x', [], { $ref: '#/nope/__proto__' }, { $ref: 'http://example.com' }, { anyOf: [] }];
    for (const schema of [...malformed, { type: 'number', minimum: 5, maximum: 1 }]) {
      expect(() => JSON.stringify(valueForSchema(schema, { text }))).not.toThrow();
    }
  });
});

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

    const described = await simulator.complete(
      request(
        { response_format: { type: 'json_object' } },
        {
          messages: [
            { role: 'system', content: `Answer with JSON following this schema: ${JSON.stringify(zodResponseFormat(Order, 'o').json_schema.schema)}` },
            { role: 'user', content: 'An order, please' },
          ],
        },
      ),
    );
    expect(Order.safeParse(JSON.parse(described.choices[0].message.content!)).success).toBe(true);

    const cut = await simulator.complete(request({ response_format: { type: 'json_object' } }, { maxTokens: 5 }));
    expect(cut.choices[0].finish_reason).toBe('length');
    expect(cut.usage?.completion_tokens).toBe(5);
  });
});
