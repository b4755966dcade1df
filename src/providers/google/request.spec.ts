import { Cancellation } from '../../common/cancellation';
import { DEFAULT_CATALOG } from '../../models/model-catalog';
import type { ProviderRequest } from '../provider-adapter';
import { mimeTypeOf, SKIP_THOUGHT_SIGNATURE, toGeminiRequest } from './request';

const flash = DEFAULT_CATALOG.find((m) => m.id === 'gemini-2.5-flash')!;

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: flash, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 64, extra: {}, cancellation: new Cancellation(), ...overrides };
}

const tool = (name: string) => ({ type: 'function' as const, function: { name, parameters: { type: 'object' } } });

describe('toGeminiRequest', () => {
  it('sends reasoning_effort as a thinking budget, and leaves the model its own thinking without one', () => {
    expect(toGeminiRequest(request({ extra: { reasoning_effort: 'medium' } })).config?.thinkingConfig).toEqual({ thinkingBudget: 8192 });
    expect(toGeminiRequest(request({ extra: { reasoning_effort: 'none' } })).config).not.toHaveProperty('thinkingConfig');
    expect(toGeminiRequest(request()).config).not.toHaveProperty('thinkingConfig');
    expect(() => toGeminiRequest(request({ extra: { reasoning_effort: 'extreme' } }))).toThrow(/reasoning_effort/);
  });

  it('sends one plain request: no SDK continuation or automatic function calling', () => {
    const { model, config } = toGeminiRequest(request());
    expect(model).toBe('gemini-2.5-flash');
    expect(config).toMatchObject({ maxOutputTokens: 64, automaticContinuation: false, automaticFunctionCalling: { disable: true } });
  });

  it('maps allowed_tools to VALIDATED (auto) or ANY (required) with the names', () => {
    const allowed = (mode: string) => ({
      type: 'allowed_tools',
      allowed_tools: { mode, tools: [{ type: 'function', function: { name: 'a' } }] },
    });
    const config = (toolChoice: unknown) => toGeminiRequest(request({ tools: [tool('a'), tool('b')], extra: { tool_choice: toolChoice } })).config;
    expect(config(allowed('auto'))?.toolConfig).toEqual({ functionCallingConfig: { mode: 'VALIDATED', allowedFunctionNames: ['a'] } });
    expect(config(allowed('required'))?.toolConfig).toEqual({ functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['a'] } });
    expect(config(undefined)?.toolConfig).toBeUndefined();
  });

  it('sends no tool config without tools', () => {
    expect(toGeminiRequest(request({ extra: { tool_choice: 'none' } })).config?.toolConfig).toBeUndefined();
  });

  it('decodes non-base64 data URLs and keeps base64 ones as they are', () => {
    const { contents } = toGeminiRequest(
      request({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: 'data:image/svg+xml,%3Csvg%2F%3E' } },
              { type: 'image_url', image_url: { url: 'data:image/webp;base64,UklGRg==' } },
            ],
          },
        ],
      }),
    );
    expect(contents).toEqual([
      {
        role: 'user',
        parts: [
          { inlineData: { mimeType: 'image/svg+xml', data: Buffer.from('<svg/>').toString('base64') } },
          { inlineData: { mimeType: 'image/webp', data: 'UklGRg==' } },
        ],
      },
    ]);
  });

  it('answers legacy function messages and drops empty texts', () => {
    const { contents } = toGeminiRequest(
      request({
        messages: [
          { role: 'user', content: '' },
          { role: 'assistant', content: null, function_call: { name: 'now', arguments: '' } },
          { role: 'function', name: 'now', content: '"12:00"' },
        ],
      }),
    );
    expect(contents).toEqual([
      { role: 'model', parts: [{ functionCall: { name: 'now', args: {} } }] },
      { role: 'user', parts: [{ functionResponse: { name: 'now', response: { content: '"12:00"' } } }] },
    ]);
  });

  it('signs replayed function calls for models after Gemini 2 only', () => {
    const replay = (upstreamModel: string) => {
      const { contents } = toGeminiRequest(
        request({
          model: { ...flash, upstreamModel },
          messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] }],
        }),
      );
      return contents as Array<{ parts: Array<{ thoughtSignature?: string }> }>;
    };
    expect(replay('gemini-2.5-pro')[0].parts[0].thoughtSignature).toBeUndefined();
    expect(replay('models/gemini-2.0-flash')[0].parts[0].thoughtSignature).toBeUndefined();
    expect(replay('gemini-3-flash-preview')[0].parts[0].thoughtSignature).toBe(SKIP_THOUGHT_SIGNATURE);
    expect(replay('gemini-flash-latest')[0].parts[0].thoughtSignature).toBe(SKIP_THOUGHT_SIGNATURE);
  });

  it('omits zero penalties and ignores mistyped extras', () => {
    const { config } = toGeminiRequest(
      request({ extra: { presence_penalty: 0, frequency_penalty: -0.5, top_p: '0.9', stop: [1, 2], seed: null, response_format: { type: 'text' } } }),
    );
    expect(config).not.toHaveProperty('presencePenalty');
    expect(config).toMatchObject({ frequencyPenalty: -0.5 });
    for (const key of ['topP', 'stopSequences', 'seed', 'responseMimeType']) expect(config).not.toHaveProperty(key);
  });
});

describe('mimeTypeOf', () => {
  it('guesses image types from the URL path', () => {
    expect(mimeTypeOf('https://x.test/a/b.webp?v=1#top')).toBe('image/webp');
    expect(mimeTypeOf('https://x.test/a.JPG')).toBe('image/jpeg');
    expect(mimeTypeOf('https://x.test/doc.pdf')).toBe('application/pdf');
    expect(mimeTypeOf('https://x.test/image')).toBe('image/jpeg');
    expect(mimeTypeOf('gs://bucket/cat.gif')).toBe('image/gif');
  });
});
