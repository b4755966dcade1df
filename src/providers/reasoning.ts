import { ApiError } from '../common/errors/api-error';
import type { ModelDefinition } from '../models/model-catalog';

/**
 * Chat completions' `reasoning_effort`, honoured per provider where the model reasons (the
 * catalog's `reasoning`): OpenAI takes it as it is, Claude and Gemini as a thinking budget
 * (the tables below, in docs/api.md). The budgets are output tokens inside the call's cap, so
 * the hold and the bill are unchanged: thinking is billed as output.
 */
export const REASONING_EFFORTS = ['minimal', 'low', 'medium', 'high'] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

/** Claude's `thinking.budget_tokens` per effort; Anthropic takes no budget under 1024. */
export const ANTHROPIC_THINKING_BUDGETS: Readonly<Record<ReasoningEffort, number>> = { minimal: 1024, low: 2048, medium: 8192, high: 24_576 };
export const ANTHROPIC_MIN_THINKING_BUDGET = 1024;

/** Gemini's `thinkingConfig.thinkingBudget` per effort (Google's own mapping for its OpenAI endpoint; 128 is 2.5 Pro's least). */
export const GEMINI_THINKING_BUDGETS: Readonly<Record<ReasoningEffort, number>> = { minimal: 128, low: 1024, medium: 8192, high: 24_576 };

/**
 * The request's extras as a deployment of `model` gets them: without `reasoning_effort` when
 * the model does not reason (OpenAI answers 400 to it on gpt-4o-mini, say).
 */
export function reasoningFor(model: Pick<ModelDefinition, 'reasoning'>, extra: Record<string, unknown>): Record<string, unknown> {
  if (model.reasoning === true || !('reasoning_effort' in extra)) return extra;
  const { reasoning_effort: _dropped, ...rest } = extra;
  return rest;
}

/**
 * The effort a request asks for, for the providers that translate it; `none` (and no effort)
 * leave the model's default. Other values are refused by `checkReasoningEffort` first.
 */
export function reasoningEffortOf(extra: Record<string, unknown>): ReasoningEffort | undefined {
  const effort = extra.reasoning_effort;
  return (REASONING_EFFORTS as readonly unknown[]).includes(effort) ? (effort as ReasoningEffort) : undefined;
}

/** For the providers that translate the effort into a budget: a value they have no budget for is a 400 naming it. */
export function checkReasoningEffort(extra: Record<string, unknown>): void {
  const effort = extra.reasoning_effort;
  if (effort === undefined || effort === null || effort === 'none' || reasoningEffortOf(extra)) return;
  throw ApiError.badRequest(`reasoning_effort must be one of none, ${REASONING_EFFORTS.join(', ')}.`, 'reasoning_effort', 'unsupported_parameter');
}

/**
 * Claude's thinking for an effort: the table's budget, lowered below the call's `max_tokens`
 * (Anthropic's rule, as for a native request); none when that leaves less than 1024.
 */
export function anthropicThinking(effort: ReasoningEffort | undefined, maxTokens: number): { type: 'enabled'; budget_tokens: number } | undefined {
  if (!effort) return undefined;
  const budget = Math.min(ANTHROPIC_THINKING_BUDGETS[effort], maxTokens - 1);
  return budget >= ANTHROPIC_MIN_THINKING_BUDGET ? { type: 'enabled', budget_tokens: budget } : undefined;
}

/** Gemini's thinking budget for an effort; none leaves the model's own (dynamic) thinking. */
export function geminiThinkingBudget(effort: ReasoningEffort | undefined): number | undefined {
  return effort ? GEMINI_THINKING_BUDGETS[effort] : undefined;
}
