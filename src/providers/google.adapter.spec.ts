import type { GenerateContentResponse } from '@google/genai';
import { DEFAULT_CATALOG } from '../models/model-catalog';
import {
  GeminiStreamTranslator,
  mimeTypeOf,
  SKIP_THOUGHT_SIGNATURE,
  toChatCompletion,
  toFinishReason,
  toGeminiRequest,
  toUsage,
} from './google.adapter';
import type { ProviderRequest } from './provider-adapter';

const flash = DEFAULT_CATALOG.find((m) => m.id === 'gemini-2.5-flash')!;

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: flash, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 64, extra: {}, signal: new AbortController().signal, ...overrides };
}

const tool = (name: string) => ({ type: 'function' as const, function: { name, parameters: { type: 'object' } } });

describe('toGeminiRequest', () => {
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

describe('translation helpers', () => {
  it('guesses image types from the URL path', () => {
    expect(mimeTypeOf('https://x.test/a/b.webp?v=1#top')).toBe('image/webp');
    expect(mimeTypeOf('https://x.test/a.JPG')).toBe('image/jpeg');
    expect(mimeTypeOf('https://x.test/doc.pdf')).toBe('application/pdf');
    expect(mimeTypeOf('https://x.test/image')).toBe('image/jpeg');
    expect(mimeTypeOf('gs://bucket/cat.gif')).toBe('image/gif');
  });

  it('maps finish reasons', () => {
    expect(toFinishReason('STOP', false)).toBe('stop');
    expect(toFinishReason(undefined, false)).toBe('stop');
    expect(toFinishReason('MAX_TOKENS', false)).toBe('length');
    expect(toFinishReason('STOP', true)).toBe('tool_calls');
    expect(toFinishReason('MALFORMED_FUNCTION_CALL', false)).toBe('content_filter');
    expect(toFinishReason('STOP', false, true)).toBe('content_filter');
  });

  it('bills thinking tokens as output and reports cached tokens', () => {
    expect(toUsage({ promptTokenCount: 10, candidatesTokenCount: 5, thoughtsTokenCount: 7, cachedContentTokenCount: 4 })).toEqual({
      prompt_tokens: 10,
      completion_tokens: 12,
      total_tokens: 22,
      prompt_tokens_details: { cached_tokens: 4 },
      completion_tokens_details: { reasoning_tokens: 7 },
    });
    expect(toUsage({})).toMatchObject({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
  });

  it('turns a response without candidates into one empty choice', () => {
    const completion = toChatCompletion({} as GenerateContentResponse, request());
    expect(completion.choices).toEqual([
      { index: 0, message: { role: 'assistant', content: '', refusal: null }, finish_reason: 'stop', logprobs: null },
    ]);
    expect(completion.usage).toBeUndefined();
    expect(completion.id).toMatch(/^chatcmpl-[A-Za-z0-9]{29}$/);
  });
});

describe('GeminiStreamTranslator', () => {
  const event = (body: object) => body as GenerateContentResponse;

  it('skips thoughts and empty texts, and sends no usage chunk when Gemini sent none', () => {
    const translator = new GeminiStreamTranslator(request());
    const chunks = [
      ...translator.push(event({ candidates: [{ content: { parts: [{ text: 'hmm', thought: true }] } }] })),
      ...translator.push(event({ candidates: [{ content: { parts: [{ text: '' }] } }] })),
      ...translator.push(event({ candidates: [{ content: { parts: [{ text: 'Yes.' }] }, finishReason: 'STOP' }] })),
      ...translator.finish(),
    ];
    expect(chunks.map((c) => c.choices.map((choice) => [choice.delta, choice.finish_reason]))).toEqual([
      [[{ role: 'assistant', content: '' }, null]],
      [[{ content: 'Yes.' }, null]],
      [[{}, 'stop']],
    ]);
  });

  it('fails when the stream had no event at all', () => {
    const translator = new GeminiStreamTranslator(request());
    expect(() => [...translator.finish()]).toThrow(/without any event/);
  });
});
