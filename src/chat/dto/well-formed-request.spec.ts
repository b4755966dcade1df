import 'reflect-metadata';
import { plainToInstance } from 'class-transformer';
import { getMetadataStorage, validate } from 'class-validator';
import fc from 'fast-check';
import {
  ChatCompletionRequestDto,
  ChatMessageDto,
  FunctionCallDto,
  FunctionDefinitionDto,
  MESSAGE_ROLES,
  StreamOptionsDto,
  ToolCallDto,
  ToolDefinitionDto,
} from './chat-completion-request.dto';
import { wellFormedRequest } from './well-formed-request';

/** What the DTO's decorators say of a request's own fields: the DTO, or null when they refuse it. */
async function byDecorators(own: Record<string, unknown>): Promise<ChatCompletionRequestDto | null> {
  const dto = plainToInstance(ChatCompletionRequestDto, structuredClone(own));
  const errors = await validate(dto, { stopAtFirstError: true, forbidUnknownValues: false });
  return errors.length === 0 ? dto : null;
}

const plain = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown;

// Values of any JSON type, for a field to be wrong in every way; `scalar` alone keeps arrays
// out of places that take an object, where the decorators accept some arrays (they validate
// each item) and wellFormedRequest never does.
const scalar = fc.oneof(fc.constant(null), fc.boolean(), fc.integer({ min: -5, max: 300 }), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.string());
const anyJson = fc.oneof(scalar, fc.array(scalar, { maxLength: 3 }), fc.dictionary(fc.string({ maxLength: 5 }), scalar, { maxKeys: 3 }));
const optional = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });
const stringOf = (max: number) => fc.oneof({ weight: 9, arbitrary: fc.string({ maxLength: 20 }) }, { weight: 1, arbitrary: fc.string({ minLength: max - 1, maxLength: max + 1 }) });
// Right 19 times in 20, so that a request of a dozen fields is accepted often enough (about one in ten).
const orWrong = <T>(arb: fc.Arbitrary<T>, wrong: fc.Arbitrary<unknown>) => fc.oneof({ weight: 19, arbitrary: arb }, { weight: 1, arbitrary: wrong });

function requests(wrong: fc.Arbitrary<unknown>) {
  const part = fc.oneof(
    { weight: 4, arbitrary: fc.record({ type: fc.constant('text'), text: orWrong(fc.string(), wrong) }) },
    { weight: 2, arbitrary: fc.record({ type: fc.constant('image_url'), image_url: orWrong(fc.record({ url: fc.string() }), wrong) }) },
    { weight: 2, arbitrary: fc.record({ type: fc.constant('input_audio'), input_audio: fc.record({ data: fc.string(), format: orWrong(fc.constantFrom('wav', 'mp3'), fc.string()) }) }) },
    { weight: 1, arbitrary: fc.record({ type: fc.oneof(fc.string(), wrong) }) },
  );
  const toolCall = fc.record(
    { id: orWrong(fc.string(), wrong), type: orWrong(fc.constant('function'), wrong), function: orWrong(fc.record({ name: orWrong(fc.string(), wrong), arguments: orWrong(fc.string(), wrong) }), wrong) },
    { requiredKeys: [] },
  );
  const message = fc.record(
    {
      role: orWrong(fc.constantFrom(...MESSAGE_ROLES), wrong),
      content: orWrong(fc.oneof(fc.string(), fc.constant(null), fc.array(part, { maxLength: 3 })), wrong),
      name: orWrong(fc.string(), wrong),
      tool_call_id: orWrong(fc.string(), wrong),
      tool_calls: orWrong(fc.array(toolCall, { maxLength: 2 }), wrong),
      refusal: anyJson,
    },
    { requiredKeys: ['role'] },
  );
  const fn = fc.record(
    {
      name: orWrong(fc.oneof(fc.stringMatching(/^[a-zA-Z0-9_-]{1,64}$/), fc.string({ maxLength: 70 })), wrong),
      description: orWrong(fc.string(), wrong),
      parameters: orWrong(fc.dictionary(fc.string({ maxLength: 5 }), anyJson, { maxKeys: 3 }), wrong),
      strict: orWrong(fc.boolean(), wrong),
    },
    { requiredKeys: [] },
  );
  const tool = fc.record({ type: orWrong(fc.constantFrom('function', 'web_search'), wrong), function: orWrong(fn, wrong) }, { requiredKeys: [] });
  return fc.record(
    {
      model: optional(orWrong(stringOf(200), wrong)),
      assistant_id: optional(orWrong(stringOf(200), wrong)),
      messages: orWrong(fc.array(message, { minLength: 1, maxLength: 3 }), fc.oneof(wrong, fc.constant([]))),
      stream: optional(orWrong(fc.boolean(), wrong)),
      stream_options: optional(orWrong(fc.record({ include_usage: orWrong(fc.boolean(), wrong) }, { requiredKeys: [] }), wrong)),
      tools: optional(orWrong(fc.array(tool, { maxLength: 2 }), wrong)),
      temperature: optional(orWrong(fc.double({ min: 0, max: 2, noNaN: true }), fc.oneof(wrong, fc.double({ min: -1, max: 3, noNaN: true })))),
      max_tokens: optional(orWrong(fc.integer({ min: 1, max: 5000 }), fc.oneof(wrong, fc.integer({ min: -2, max: 1 })))),
      max_completion_tokens: optional(orWrong(fc.integer({ min: 1, max: 5000 }), fc.oneof(wrong, fc.integer({ min: -2, max: 1 })))),
      user_id: optional(orWrong(stringOf(256), wrong)),
      subscription_id: optional(orWrong(stringOf(256), wrong)),
      conversation_id: optional(orWrong(stringOf(200), wrong)),
    },
    { requiredKeys: [] },
  ).map((own) => plain(own) as Record<string, unknown>);
}

describe('wellFormedRequest', () => {
  it('knows every field the DTOs validate: one added there must be added to wellFormedRequest (and to the generators below)', () => {
    const validated = (dto: new () => object) => [...new Set(getMetadataStorage().getTargetValidationMetadatas(dto, '', true, false).map((m) => m.propertyName))].sort();
    expect(validated(ChatCompletionRequestDto)).toEqual(
      ['assistant_id', 'conversation_id', 'max_completion_tokens', 'max_tokens', 'messages', 'model', 'models', 'stream', 'stream_options', 'subscription_id', 'temperature', 'tools', 'user_id'].sort(),
    );
    expect(validated(ChatMessageDto)).toEqual(['content', 'name', 'role', 'tool_call_id', 'tool_calls']);
    expect(validated(ToolCallDto)).toEqual(['function', 'id', 'type']);
    expect(validated(FunctionCallDto)).toEqual(['arguments', 'name']);
    expect(validated(ToolDefinitionDto)).toEqual(['function', 'type']);
    expect(validated(FunctionDefinitionDto)).toEqual(['description', 'name', 'parameters', 'strict']);
    expect(validated(StreamOptionsDto)).toEqual(['include_usage']);
  });

  it('accepts a plain request as it came, without copying it', () => {
    const own = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 };
    expect(wellFormedRequest(own)).toBe(own);
  });

  it.each([
    ['no messages', { model: 'm', messages: [] }],
    ['a message without a role', { messages: [{ content: 'hi' }] }],
    ['a model name too long', { model: 'x'.repeat(201), messages: [{ role: 'user', content: 'hi' }] }],
    ['max_tokens 0', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 0 }],
    ['a fractional max_tokens', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 1.5 }],
    ['temperature above 2', { messages: [{ role: 'user', content: 'hi' }], temperature: 2.01 }],
    ['a stream flag as a string', { messages: [{ role: 'user', content: 'hi' }], stream: 'true' }],
    ['a tool call without its function', { messages: [{ role: 'assistant', tool_calls: [{ id: 'c', type: 'function' }] }] }],
    ['a function name with a space', { messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: { name: 'get weather' } }] }],
    ['an empty content array', { messages: [{ role: 'user', content: [] }] }],
    // eslint-disable-next-line no-sparse-arrays
    ['messages with a hole only', { messages: [,] }],
  ])('leaves %s to the decorators', async (_, own: Record<string, unknown>) => {
    expect(wellFormedRequest(own)).toBeNull();
    expect(await byDecorators(own)).toBeNull();
  });

  it('never accepts a request the decorators refuse, and accepts it unchanged', async () => {
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(requests(anyJson), async (own) => {
        const fast = wellFormedRequest(structuredClone(own));
        if (fast === null) return;
        accepted += 1;
        const dto = await byDecorators(own);
        expect(dto).not.toBeNull();
        expect(plain(dto)).toEqual(plain(fast));
      }),
      { numRuns: 3000 },
    );
    expect(accepted).toBeGreaterThan(150);
  });

  it('accepts every request the decorators accept, when no object is sent as an array', async () => {
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(requests(scalar), async (own) => {
        const dto = await byDecorators(own);
        expect(wellFormedRequest(structuredClone(own)) !== null).toBe(dto !== null);
        if (dto) accepted += 1;
      }),
      { numRuns: 3000 },
    );
    // Both outcomes must have been generated for the property to say anything.
    expect(accepted).toBeGreaterThan(150);
    expect(accepted).toBeLessThan(2700);
  });
});
