import type { ModelDefinition } from '../models/model-catalog';
import type { ChatMessage, CompletionUsage } from '../providers/provider-adapter';
import { llmCost, MicroMillicents, TokenCounts, toMillicentsNumber } from '../wallet/cost';

/** The extension object of every completion (spec: "x_service"): what the request cost and did. */
export interface XService {
  cost_millicents: number;
  iterations: number;
  tools_used: string[];
  generated_files: string[] | null;
  /** The provider and deployment (the catalog's label) of the model call that answered; null when none did. */
  provider: string | null;
  deployment: string | null;
  /** Upstream attempts of the whole request, failed ones (moved to another deployment) included. */
  attempts: number;
}

/** Who answered a model call: the catalog model, its provider, and the deployment's label. */
export interface Answerer {
  model: string;
  provider: string;
  deployment: string;
}

/** What one request has used so far, over all its model calls (iterations) and tool calls. */
export class Spend {
  iterations = 0;
  /**
   * The prompt of the model call under way, until its usage is added: a client that leaves
   * before the answer still pays for the prompt that was sent upstream.
   */
  unansweredPrompt: ChatMessage[] | null = null;
  readonly tokens: TokenCounts = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
  /** The providers' token details (reasoning, cached, audio, ...), summed per key over the model calls. */
  readonly details: UsageDetails = { prompt: {}, completion: {} };
  llmMicros: MicroMillicents = 0n;
  toolMicros: MicroMillicents = 0n;
  readonly toolsUsed: string[] = [];
  /** The deployment that answered the last model call (the answer's `model` is its model). */
  answeredBy: Answerer | null = null;
  /** Upstream attempts so far, over every model call; only the one that answered each call is charged. */
  attempts = 0;

  /** A model call is about to be made with this prompt. */
  calling(messages: ChatMessage[]): void {
    this.unansweredPrompt = messages;
  }

  addModelCall(model: ModelDefinition, usage: CompletionUsage): void {
    this.unansweredPrompt = null;
    const counts = toTokenCounts(usage);
    this.iterations += 1;
    this.tokens.inputTokens += counts.inputTokens;
    this.tokens.outputTokens += counts.outputTokens;
    this.tokens.cachedTokens += counts.cachedTokens;
    this.tokens.cacheWriteTokens = (this.tokens.cacheWriteTokens ?? 0) + (counts.cacheWriteTokens ?? 0);
    addDetails(this.details.prompt, usage.prompt_tokens_details);
    addDetails(this.details.completion, usage.completion_tokens_details);
    this.llmMicros += llmCost(model, counts);
  }

  addToolCall(name: string, micros: MicroMillicents): void {
    this.toolMicros += micros;
    if (!this.toolsUsed.includes(name)) this.toolsUsed.push(name);
  }

  get totalMicros(): MicroMillicents {
    return this.llmMicros + this.toolMicros;
  }

  /** The answer's `x_service`: what the request cost and did. */
  xService(): XService {
    return {
      cost_millicents: toMillicentsNumber(this.totalMicros),
      iterations: this.iterations,
      tools_used: [...this.toolsUsed],
      generated_files: null,
      provider: this.answeredBy?.provider ?? null,
      deployment: this.answeredBy?.deployment ?? null,
      attempts: this.attempts,
    };
  }

  /**
   * OpenAI's usage object for the whole request, with the details the providers reported
   * (LangChain's token details and the AI SDK's reasoningTokens are read from them).
   */
  usage(): CompletionUsage {
    const { inputTokens, outputTokens } = this.tokens;
    const { prompt, completion } = this.details;
    return {
      prompt_tokens: inputTokens,
      completion_tokens: outputTokens,
      total_tokens: inputTokens + outputTokens,
      ...(Object.keys(prompt).length > 0 ? { prompt_tokens_details: { ...prompt } } : {}),
      ...(Object.keys(completion).length > 0 ? { completion_tokens_details: { ...completion } } : {}),
    };
  }
}

/** Token counts by detail key (`cached_tokens`, `reasoning_tokens`, `audio_tokens`, ...). */
type Details = Record<string, number>;

interface UsageDetails {
  prompt: Details;
  completion: Details;
}

function addDetails(sum: Details, details: object | null | undefined): void {
  for (const [key, value] of Object.entries(details ?? {})) {
    if (typeof value === 'number') sum[key] = (sum[key] ?? 0) + value;
  }
}

/**
 * A provider's details made safe to pass on: only non-negative integer counts, none above the
 * total they detail (a reasoning count above the completion is clamped to it).
 */
function checkedDetails(details: unknown, total: number, name: string, problems: string[]): Details | undefined {
  if (typeof details !== 'object' || details === null || Array.isArray(details)) return undefined;
  const checked: Details = {};
  for (const [key, value] of Object.entries(details)) {
    if (value === null || value === undefined) continue;
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
      problems.push(`${name}.${key} ${JSON.stringify(value)} is not a token count`);
      continue;
    }
    if (value > total) problems.push(`${name}.${key} ${value} is above the ${total} tokens it details`);
    checked[key] = Math.min(value, total);
  }
  return Object.keys(checked).length > 0 ? checked : undefined;
}

export function toTokenCounts(usage: CompletionUsage): TokenCounts {
  return {
    inputTokens: usage.prompt_tokens ?? 0,
    outputTokens: usage.completion_tokens ?? 0,
    cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
    cacheWriteTokens: usage.prompt_tokens_details?.cache_write_tokens ?? 0,
  };
}

/** A count a provider may report: a whole, non-negative number. */
export function isTokenCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/** The bounds a provider's usage report must respect, and our own counts to fall back on. */
export interface UsageBounds {
  /** The prompt counted by our tokenizer (lazily: only needed when the report is unusable). */
  countPrompt: () => number;
  /** Tokens of the text and tool-call arguments actually generated, counted by our tokenizer. */
  generatedTokens: number;
  /** The model's context window: no call can have read more. */
  maxPromptTokens: number;
  /** The output cap sent upstream times the number of choices: no call can have written more. */
  maxCompletionTokens: number;
}

/**
 * A provider's usage report made safe to bill: never negative or fractional (a negative
 * count would credit the wallet), completion not far below what we saw generated, and never
 * above the model's limits (clamped; the caller logs the returned problems). A missing or
 * unusable count is replaced by ours.
 */
export function checkedUsage(reported: CompletionUsage | undefined, bounds: UsageBounds): { usage: CompletionUsage; problems: string[] } {
  const problems: string[] = [];
  const count = (name: string, value: unknown, fallback: () => number, max: number): number => {
    let tokens = isTokenCount(value) ? value : undefined;
    if (tokens === undefined) {
      if (reported && value !== undefined && value !== null) problems.push(`${name} ${JSON.stringify(value)} is not a token count`);
      tokens = fallback();
    }
    if (tokens > max) {
      problems.push(`${name} ${tokens} is above the model's limit of ${max}`);
      tokens = max;
    }
    return tokens;
  };
  const prompt = count('prompt_tokens', reported?.prompt_tokens, bounds.countPrompt, bounds.maxPromptTokens);
  let completion = count('completion_tokens', reported?.completion_tokens, () => bounds.generatedTokens, bounds.maxCompletionTokens);
  // Tokenizers differ by tens of percent between providers, not by half: a report below half
  // of what we saw generated is wrong, and what we saw is billed instead.
  const generated = Math.min(bounds.generatedTokens, bounds.maxCompletionTokens);
  if (completion * 2 < generated) {
    problems.push(`completion_tokens ${completion} is far below the ${generated} tokens seen generated`);
    completion = generated;
  }
  const promptDetails = checkedDetails(reported?.prompt_tokens_details, prompt, 'prompt_tokens_details', problems);
  const completionDetails = checkedDetails(reported?.completion_tokens_details, completion, 'completion_tokens_details', problems);
  return {
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      ...(promptDetails ? { prompt_tokens_details: promptDetails } : {}),
      ...(completionDetails ? { completion_tokens_details: completionDetails } : {}),
    },
    problems,
  };
}
