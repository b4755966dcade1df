import { Cancellation } from '../../common/cancellation';
import type { GenerateContentResponse } from '@google/genai';
import { DEFAULT_CATALOG } from '../../models/model-catalog';
import type { ProviderRequest } from '../provider-adapter';
import { toChatCompletion, toFinishReason, toUsage } from './response';

const flash = DEFAULT_CATALOG.find((m) => m.id === 'gemini-2.5-flash')!;

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: flash, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 64, extra: {}, cancellation: new Cancellation(), ...overrides };
}

describe('translation helpers', () => {
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
