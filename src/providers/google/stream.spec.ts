import { Cancellation } from '../../common/cancellation';
import type { GenerateContentResponse } from '@google/genai';
import { DEFAULT_CATALOG } from '../../models/model-catalog';
import type { ProviderRequest } from '../provider-adapter';
import { GeminiStreamTranslator } from './stream';

const flash = DEFAULT_CATALOG.find((m) => m.id === 'gemini-2.5-flash')!;

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: flash, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 64, extra: {}, cancellation: new Cancellation(), ...overrides };
}

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
