import { ApiError } from '../../common/errors/api-error';
import { toChatMessages, toResponsesRequest } from '../chat-translation';
import { validateResponsesRequest } from './create-response.dto';

/** The refusal of a body, as the client sees it. */
function refusal(body: unknown): { message: string; param: string | null; code: string } {
  try {
    validateResponsesRequest(body);
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    expect(error.status).toBe(400);
    return { message: error.message, param: error.param, code: error.code };
  }
  throw new Error(`accepted: ${JSON.stringify(body)}`);
}

/** Hosted tool types to server tools, as ToolsService.hostedToolTypes() has them for the built-in tools. */
const HOSTED_TOOLS = new Map([
  ['web_search', 'web_search'],
  ['web_search_preview', 'web_search'],
  ['web_search_2025_08_26', 'web_search'],
  ['web_search_preview_2025_03_11', 'web_search'],
  ['file_search', 'file_search'],
]);
const HOSTED_TOOL_TYPES = [...HOSTED_TOOLS.keys()];

const translated = (body: Record<string, unknown>) => toResponsesRequest(validateResponsesRequest(body), HOSTED_TOOLS);

describe('CreateResponseRequestDto', () => {
  describe('accepts', () => {
    it('a string input, as one user message', () => {
      const request = translated({ model: 'gpt-4o-mini', input: 'Hi', instructions: 'Be brief.' });
      expect(toChatMessages(request.echo.instructions, request.input)).toEqual([
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
      ]);
      expect(request.chat).toEqual({ model: 'gpt-4o-mini' });
      expect(request).toMatchObject({ store: true, stream: false, serverTools: [], toolIndexes: [] });
    });

    it('message items with and without a type, content parts of every kind, function calls and their outputs', () => {
      const request = translated({
        model: 'gpt-4o-mini',
        input: [
          { role: 'developer', content: 'Answer in French.' },
          {
            type: 'message',
            role: 'user',
            content: [
              { type: 'input_text', text: 'Look:' },
              { type: 'input_image', image_url: 'https://x.example/a.png', detail: 'low' },
              { type: 'input_file', file_data: 'data:application/pdf;base64,AAAA', filename: 'a.pdf' },
              { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
            ],
          },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Seen' }, { type: 'refusal', refusal: '.' }] },
          { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{}' },
          { type: 'function_call', call_id: 'call_2', name: 'get_time', arguments: '{}' },
          { type: 'function_call_output', call_id: 'call_1', output: [{ type: 'input_text', text: 'Sun' }, { type: 'input_text', text: 'ny' }] },
          { type: 'item_reference', id: 'msg_1' },
        ],
      });
      expect(request.input.map((item) => item.type)).toEqual(['message', 'message', 'message', 'function_call', 'function_call', 'function_call_output', 'item_reference']);
      expect(request.input.every((item) => typeof item.id === 'string' && item.id.length > 0)).toBe(true);
      expect(request.input[3].id).toMatch(/^fc_/);
      expect(toChatMessages(null, request.input.slice(0, 6))).toEqual([
        { role: 'developer', content: 'Answer in French.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look:' },
            { type: 'image_url', image_url: { url: 'https://x.example/a.png', detail: 'low' } },
            { type: 'file', file: { file_data: 'data:application/pdf;base64,AAAA', filename: 'a.pdf' } },
            { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
          ],
        },
        // Calls right after an assistant message are its tool calls.
        {
          role: 'assistant',
          content: 'Seen.',
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{}' } },
            { id: 'call_2', type: 'function', function: { name: 'get_time', arguments: '{}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'Sunny' },
      ]);
    });

    it('function tools, and every alias of the server tools with an assistant', () => {
      const parameters = { type: 'object', properties: { constructor: { type: 'string' } } };
      const request = translated({
        assistant_id: 'searcher',
        input: 'Hi',
        tools: [...HOSTED_TOOL_TYPES.map((type) => ({ type, vector_store_ids: [] })), { type: 'function', name: 'f', parameters, strict: null }],
        tool_choice: { type: 'function', name: 'f' },
        parallel_tool_calls: false,
      });
      expect(request.serverTools.map((tool) => tool.name)).toEqual(['web_search', 'web_search', 'web_search', 'web_search', 'file_search']);
      expect(request.toolIndexes).toEqual([HOSTED_TOOL_TYPES.length]);
      // A JSON Schema property named "constructor" reaches the chat core as sent.
      expect(request.chat.tools).toEqual([{ type: 'function', function: { name: 'f', parameters } }]);
      expect(request.chat).toMatchObject({ tool_choice: { type: 'function', function: { name: 'f' } }, parallel_tool_calls: false });
    });

    it('the continuation, output and echoed fields, with nulls taken as absent', () => {
      const format = { type: 'json_schema', name: 'city', schema: { type: 'object' }, strict: true };
      const request = translated({
        model: 'assistant/helper',
        previous_response_id: 'resp_1',
        stream: true,
        stream_options: { include_obfuscation: false },
        max_output_tokens: 64,
        temperature: 0.2,
        top_p: 1,
        text: { format, verbosity: null },
        reasoning: { effort: 'low', summary: null },
        metadata: { app: 'spec' },
        user: 'end-user-7',
        include: ['reasoning.encrypted_content'],
        background: false,
        truncation: 'auto',
        service_tier: 'default',
        top_logprobs: 0,
        prompt_cache_key: 'k',
        safety_identifier: 's',
        instructions: null,
        input: null,
      });
      expect(request).toMatchObject({ previousResponseId: 'resp_1', assistantRef: 'helper', stream: true, input: [] });
      expect(request.chat).toEqual({
        model: 'assistant/helper',
        max_completion_tokens: 64,
        temperature: 0.2,
        top_p: 1,
        response_format: { type: 'json_schema', json_schema: { name: 'city', schema: { type: 'object' }, strict: true } },
        stream: true,
        stream_options: { include_usage: true },
        user_id: 'end-user-7',
        reasoning_effort: 'low',
      });
      expect(JSON.parse(JSON.stringify(request.echo))).toMatchObject({ text: { format }, metadata: { app: 'spec' }, truncation: 'auto', user: 'end-user-7', instructions: null });
      expect(translated({ conversation: { id: 'c1' } }).conversationId).toBe('c1');
    });
  });

  describe('refuses, naming the field', () => {
    it.each<[unknown, string | null, string | undefined]>([
      [[], null, 'invalid_body'],
      [{ input: 'Hi', frequency_penalty: 1 }, 'frequency_penalty', 'unknown_parameter'],
      [{}, 'input', undefined],
      [{ input: 5 }, 'input', undefined],
      [{ input: [5] }, 'input.0', undefined],
      [{ input: [{ content: 'Hi' }] }, 'input.0.type', undefined],
      [{ input: [{ type: 'reasoning' }] }, 'input.0.type', 'unsupported_input_item'],
      [{ input: [{ role: 'tool', content: 'x' }] }, 'input.0.role', undefined],
      [{ input: [{ role: 'user', content: 5 }] }, 'input.0.content', undefined],
      [{ input: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }] }, 'input.0.content.0.type', 'unsupported_content'],
      [{ input: [{ role: 'user', content: [{ type: 'input_text' }] }] }, 'input.0.content.0.text', undefined],
      [{ input: [{ role: 'user', content: [{ type: 'input_file', file_url: 'https://x.example/a.pdf' }] }] }, 'input.0.content.0.file_url', 'unsupported_content'],
      [{ input: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'x', format: 'ogg' } }] }] }, 'input.0.content.0.input_audio', undefined],
      [{ input: [{ type: 'function_call', call_id: 'c', arguments: '{}' }] }, 'input.0.name', undefined],
      [{ input: [{ type: 'function_call_output', call_id: 'c', output: ['x', { type: 'input_image' }] }] }, 'input.0.output.0', undefined],
      [{ input: 'Hi', tools: {} }, 'tools', undefined],
      [{ input: 'Hi', tools: [{ name: 'f' }] }, 'tools.0.type', undefined],
      [{ input: 'Hi', tool_choice: 'any' }, 'tool_choice', 'unsupported_parameter'],
      [{ input: 'Hi', top_p: '1' }, 'top_p', undefined],
      [{ input: 'Hi', text: { format: { type: 'xml' } } }, 'text.format.type', undefined],
      [{ input: 'Hi', text: { format: { type: 'json_schema', name: 'x' } } }, 'text.format', undefined],
      [{ input: 'Hi', text: { verbosity: 'low' } }, 'text.verbosity', 'unsupported_parameter'],
      [{ input: 'Hi', reasoning: [] }, 'reasoning', undefined],
      [{ input: 'Hi', reasoning: { effort: 3 } }, 'reasoning.effort', undefined],
      [{ input: 'Hi', stream: 'yes' }, 'stream', undefined],
      [{ input: 'Hi', store: 'no' }, 'store', undefined],
      [{ input: 'Hi', store: false, conversation: 'c1' }, 'store', 'unsupported_parameter'],
      [{ input: 'Hi', previous_response_id: 'resp_1', conversation: 'c1' }, 'conversation', undefined],
      [{ input: 'Hi', conversation: { name: 'c1' } }, 'conversation', undefined],
      [{ input: 'Hi', metadata: { app: 5 } }, 'metadata.app', undefined],
      [{ input: 'Hi', metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata', undefined],
      [{ input: 'Hi', metadata: { ['k'.repeat(65)]: 'v' } }, 'metadata', undefined],
      [{ input: 'Hi', include: 'reasoning.encrypted_content' }, 'include', undefined],
      [{ input: 'Hi', include: ['reasoning.encrypted_content', 'message.output_text.logprobs'] }, 'include.1', 'unsupported_parameter'],
      [{ input: 'Hi', truncation: 'never' }, 'truncation', undefined],
      [{ input: 'Hi', service_tier: 'flex' }, 'service_tier', 'unsupported_parameter'],
      [{ input: 'Hi', top_logprobs: 2 }, 'top_logprobs', 'unsupported_parameter'],
      [{ input: 'Hi', max_tool_calls: 2 }, 'max_tool_calls', 'unsupported_parameter'],
      [{ input: 'Hi', instructions: 5 }, 'instructions', undefined],
      [{ input: 'Hi', model: 5 }, 'model', undefined],
    ])('%j: %s', (body, param, code) => {
      const refused = refusal(body);
      expect(refused.param).toBe(param);
      if (code) expect(refused.code).toBe(code);
      // The message says which field, so that it reads alone.
      if (param) expect(refused.message).toContain(param);
    });

    it.each<[Record<string, unknown>, string, string]>([
      [{ type: 'code_interpreter' }, 'tools.0.type', 'unsupported_tool'],
      [{ type: 'constructor' }, 'tools.0.type', 'unsupported_tool'],
      [{ type: 'web_search_preview' }, 'tools.0', 'tool_requires_assistant'],
      [{ type: 'file_search', vector_store_ids: ['vs_1'] }, 'tools.0.vector_store_ids', 'unsupported_parameter'],
    ])('the tool %j, against the registered server tools, when translated', (tool, param, code) => {
      const assistantMode = code === 'tool_requires_assistant' ? {} : { assistant_id: 'helper' };
      expect(() => translated({ ...assistantMode, input: 'Hi', tools: [tool] })).toThrow(expect.objectContaining({ param, code }));
    });

    it('a hosted tool without an assistant, and a non-text part in an assistant message, when translated', () => {
      expect(() => translated({ model: 'gpt-4o-mini', input: 'Hi', tools: [{ type: 'web_search_preview' }] })).toThrow(
        expect.objectContaining({ param: 'tools.0', code: 'tool_requires_assistant' }),
      );
      const request = translated({ input: [{ role: 'assistant', content: [{ type: 'input_image', image_url: 'https://x.example/a.png' }] }] });
      expect(() => toChatMessages(null, request.input)).toThrow(expect.objectContaining({ param: 'input.0.content.0' }));
    });
  });
});
