import { ApiError } from '../common/errors/api-error';
import { DEFAULT_CATALOG } from '../models/model-catalog';
import { anthropicThinking, checkReasoningEffort, geminiThinkingBudget, reasoningEffortOf, reasoningFor } from './reasoning';

const model = (id: string) => DEFAULT_CATALOG.find((m) => m.id === id)!;

describe('reasoning_effort per provider', () => {
  it('is kept for a model that reasons and dropped for one that does not', () => {
    const extra = { reasoning_effort: 'high', top_p: 0.5 };
    expect(reasoningFor(model('o4-mini'), extra)).toEqual(extra);
    expect(reasoningFor(model('gpt-4o-mini'), extra)).toEqual({ top_p: 0.5 });
    expect(reasoningFor({}, extra)).toEqual({ top_p: 0.5 });
    expect(DEFAULT_CATALOG.filter((m) => m.reasoning).map((m) => m.id)).toEqual(['o4-mini', 'claude-sonnet-4-6', 'claude-haiku-4-5', 'gemini-2.5-pro', 'gemini-2.5-flash']);
  });

  it("becomes Claude's thinking budget, below max_tokens, and none without room for 1024", () => {
    expect(anthropicThinking('minimal', 64_000)).toEqual({ type: 'enabled', budget_tokens: 1024 });
    expect(anthropicThinking('low', 64_000)).toEqual({ type: 'enabled', budget_tokens: 2048 });
    expect(anthropicThinking('medium', 64_000)).toEqual({ type: 'enabled', budget_tokens: 8192 });
    expect(anthropicThinking('high', 64_000)).toEqual({ type: 'enabled', budget_tokens: 24_576 });
    expect(anthropicThinking('high', 4000)).toEqual({ type: 'enabled', budget_tokens: 3999 });
    expect(anthropicThinking('low', 1025)).toEqual({ type: 'enabled', budget_tokens: 1024 });
    expect(anthropicThinking('low', 1024)).toBeUndefined();
    expect(anthropicThinking(undefined, 64_000)).toBeUndefined();
  });

  it("becomes Gemini's thinking budget", () => {
    expect(['minimal', 'low', 'medium', 'high'].map((effort) => geminiThinkingBudget(reasoningEffortOf({ reasoning_effort: effort })))).toEqual([128, 1024, 8192, 24_576]);
    expect(geminiThinkingBudget(reasoningEffortOf({ reasoning_effort: 'none' }))).toBeUndefined();
    expect(geminiThinkingBudget(reasoningEffortOf({}))).toBeUndefined();
  });

  it('refuses, where it is translated, an effort that has no budget', () => {
    for (const ok of [undefined, null, 'none', 'minimal', 'low', 'medium', 'high']) expect(() => checkReasoningEffort({ reasoning_effort: ok })).not.toThrow();
    for (const bad of ['extreme', 3, {}]) {
      let error: unknown;
      try {
        checkReasoningEffort({ reasoning_effort: bad });
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(ApiError);
      expect(error).toMatchObject({ status: 400, param: 'reasoning_effort', code: 'unsupported_parameter' });
    }
  });
});
