import { ApiError } from '../common/errors/api-error';
import { toChatRequest } from './chat-translation';
import { validateMessagesRequest } from './dto/create-message.dto';

const translate = (body: Record<string, unknown>) => toChatRequest(validateMessagesRequest({ model: 'gpt-4o-mini', max_tokens: 100, ...body }));
const refusal = (body: Record<string, unknown>) => {
  try {
    translate(body);
  } catch (error) {
    return error as ApiError;
  }
  throw new Error('not refused');
};

describe('Messages request -> chat body', () => {
  it('maps system blocks, tools, tool_choice, stop_sequences and metadata.user_id; drops what has no chat field', () => {
    const { body } = translate({
      system: [{ type: 'text', text: 'A', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'B' }],
      messages: [{ role: 'user', content: 'Hi' }],
      tools: [
        { name: 'f', input_schema: { $schema: 'x', type: 'object' } },
        { type: 'web_search_20250305', name: 'web_search', max_uses: 3 },
      ],
      tool_choice: { type: 'tool', name: 'f', disable_parallel_tool_use: true },
      stop_sequences: ['END'],
      metadata: { user_id: 'u'.repeat(300) },
      thinking: { type: 'adaptive' },
      output_config: { effort: 'low' },
      top_k: 5,
      stream: true,
    });
    expect(body).toEqual({
      model: 'gpt-4o-mini',
      max_tokens: 100,
      messages: [
        { role: 'system', content: 'A\n\nB' },
        { role: 'user', content: 'Hi' },
      ],
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
      parallel_tool_calls: false,
      stop: ['END'],
      top_k: 5,
      user_id: 'u'.repeat(256),
      reasoning_effort: 'medium',
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('maps thinking onto reasoning_effort: enabled by budget band (< 4096 low, < 16384 medium, else high), adaptive medium, disabled none', () => {
    const effort = (thinking: unknown) => translate({ messages: [{ role: 'user', content: 'x' }], max_tokens: 32_000, thinking }).body.reasoning_effort;
    expect(effort({ type: 'enabled', budget_tokens: 1024 })).toBe('low');
    expect(effort({ type: 'enabled', budget_tokens: 4095 })).toBe('low');
    expect(effort({ type: 'enabled', budget_tokens: 4096 })).toBe('medium');
    expect(effort({ type: 'enabled', budget_tokens: 16_383 })).toBe('medium');
    expect(effort({ type: 'enabled', budget_tokens: 16_384 })).toBe('high');
    expect(effort({ type: 'enabled' })).toBe('medium');
    expect(effort({ type: 'adaptive' })).toBe('medium');
    expect(effort({ type: 'disabled' })).toBeUndefined();
    expect(effort({ type: 'something-new' })).toBeUndefined();
    expect(effort(undefined)).toBeUndefined();
  });

  it('maps each tool_choice, and sends none without tools', () => {
    const choice = (type: string) => translate({ messages: [{ role: 'user', content: 'x' }], tools: [{ name: 'f', input_schema: {} }], tool_choice: { type } }).body.tool_choice;
    expect([choice('auto'), choice('any'), choice('none')]).toEqual(['auto', 'required', 'none']);
    expect(translate({ messages: [{ role: 'user', content: 'x' }], tool_choice: { type: 'any' } }).body).not.toHaveProperty('tool_choice');
  });

  it('puts tool results first as tool messages, their images after in the user message, and drops thinking', () => {
    const { messages } = translate({
      messages: [
        { role: 'user', content: 'Read it' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 't', signature: 's' },
            { type: 'tool_use', id: 'a', name: 'read', input: { path: 'x.png' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'here' },
            { type: 'tool_result', tool_use_id: 'a', content: [{ type: 'text', text: 'an image:' }, { type: 'image', source: { type: 'url', url: 'https://e/x.png' } }] },
          ],
        },
        { role: 'assistant', content: [{ type: 'redacted_thinking', data: 'zzz' }] },
        { role: 'user', content: [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBE' } }] },
      ],
    });
    expect(messages).toEqual([
      { role: 'user', content: 'Read it' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'read', arguments: '{"path":"x.png"}' } }] },
      { role: 'tool', tool_call_id: 'a', content: 'an image:' },
      { role: 'user', content: [{ type: 'text', text: 'here' }, { type: 'image_url', image_url: { url: 'https://e/x.png' } }] },
      { role: 'user', content: [{ type: 'file', file: { file_data: 'data:application/pdf;base64,JVBE', filename: 'document.pdf' } }] },
    ]);
  });

  it('maps output_config.format (structured output, as Claude Code titles its sessions) to response_format', () => {
    const schema = { $schema: 'x', type: 'object', properties: { title: { type: 'string' } }, required: ['title'] };
    const { body } = translate({ messages: [{ role: 'user', content: 'x' }], output_config: { effort: 'low', format: { type: 'json_schema', schema } } });
    expect(body.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'output', schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] } } });
    expect(translate({ messages: [{ role: 'user', content: 'x' }], output_config: { effort: 'low' } }).body).not.toHaveProperty('response_format');
    expect(refusal({ messages: [{ role: 'user', content: 'x' }], output_config: { format: { type: 'xml' } } })).toMatchObject({ status: 400, param: 'output_config.format.type' });
    expect(refusal({ messages: [{ role: 'user', content: 'x' }], output_config: { format: { type: 'json_schema' } } })).toMatchObject({ param: 'output_config.format.schema' });
  });

  it("drops Claude Code's x-anthropic-billing-header line from the system prompt", () => {
    const header = 'x-anthropic-billing-header: cc_version=2.1.332.4fa; cc_entrypoint=sdk-cli; cch=36ee5;';
    const systemOf = (system: unknown) => translate({ system, messages: [{ role: 'user', content: 'x' }] }).messages[0];
    expect(systemOf([{ type: 'text', text: header }, { type: 'text', text: 'You are Claude Code.' }])).toEqual({ role: 'system', content: 'You are Claude Code.' });
    expect(systemOf(`${header}\nYou are Claude Code.`)).toEqual({ role: 'system', content: 'You are Claude Code.' });
    expect(systemOf('Mention x-anthropic-billing-header: as text.')).toEqual({ role: 'system', content: 'Mention x-anthropic-billing-header: as text.' });
  });

  it("hides deferred tools until a tool_reference loads them, and gives the loaded tool's definition in the tool message", () => {
    const tools = [
      { name: 'ToolSearch', input_schema: { type: 'object' } },
      { name: 'WebFetch', description: 'Fetch a page', input_schema: { $schema: 'x', type: 'object', properties: { url: { type: 'string' } } }, defer_loading: true },
      { name: 'DeferredToolPlaceholder', input_schema: { type: 'object' }, defer_loading: true },
    ];
    const ask = { role: 'user', content: 'Fetch it' };
    expect(translate({ messages: [ask], tools }).tools.map((tool) => tool.function.name)).toEqual(['ToolSearch']);

    const { tools: sent, messages } = translate({
      messages: [
        ask,
        { role: 'assistant', content: [{ type: 'tool_use', id: 's', name: 'ToolSearch', input: { query: 'select:WebFetch' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 's', content: [{ type: 'tool_reference', tool_name: 'WebFetch' }] }] },
      ],
      tools,
    });
    expect(sent.map((tool) => tool.function.name)).toEqual(['ToolSearch', 'WebFetch']);
    expect(messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 's',
      content: '<functions>\n<function>{"description":"Fetch a page","name":"WebFetch","parameters":{"type":"object","properties":{"url":{"type":"string"}}}}</function>\n</functions>',
    });
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 's', content: [{ type: 'tool_reference' }] }] }] })).toMatchObject({
      param: 'messages.0.content.0.content.0.tool_name',
    });
  });

  it('refuses with a 400 naming the field', () => {
    expect(refusal({ max_tokens: undefined, messages: [{ role: 'user', content: 'x' }] })).toMatchObject({ status: 400, param: 'max_tokens' });
    expect(refusal({ messages: [] })).toMatchObject({ param: 'messages' });
    expect(refusal({ messages: [{ role: 'tool', content: 'x' }] })).toMatchObject({ param: 'messages.0.role' });
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'tool_use', id: 'a', name: 'f', input: {} }] }] })).toMatchObject({ param: 'messages.0.content.0.type' });
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'server_tool_use' }] }] })).toMatchObject({ code: 'unsupported_content' });
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'x' } }] }] })).toMatchObject({
      param: 'messages.0.content.0.source.media_type',
    });
    expect(refusal({ messages: [{ role: 'user', content: 'x' }], tools: [{ name: 'f' }] })).toMatchObject({ param: 'tools.0.input_schema' });
    expect(refusal({ messages: [{ role: 'user', content: 'x' }], temperature: 1.5 })).toMatchObject({ param: 'temperature' });
    expect(refusal({ messages: [{ role: 'user', content: 'x' }], tool_choice: { type: 'maybe' } })).toMatchObject({ param: 'tool_choice.type' });
  });
});
