import type { ModelDefinition } from '../models/model-catalog';
import type { CompletionUsage } from '../providers/provider-adapter';
import { llmCost, MicroMillicents } from '../wallet/cost';

export interface TokenCounts {
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
}

/** What one request has used so far, over all its model calls (iterations) and tool calls. */
export class Spend {
  iterations = 0;
  readonly tokens: TokenCounts = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 };
  llmMicros: MicroMillicents = 0n;
  toolMicros: MicroMillicents = 0n;
  readonly toolsUsed: string[] = [];

  addModelCall(model: ModelDefinition, usage: CompletionUsage): void {
    const counts = toTokenCounts(usage);
    this.iterations += 1;
    this.tokens.inputTokens += counts.inputTokens;
    this.tokens.outputTokens += counts.outputTokens;
    this.tokens.cachedTokens += counts.cachedTokens;
    this.llmMicros += llmCost(model, counts);
  }

  addToolCall(name: string, micros: MicroMillicents): void {
    this.toolMicros += micros;
    if (!this.toolsUsed.includes(name)) this.toolsUsed.push(name);
  }

  get totalMicros(): MicroMillicents {
    return this.llmMicros + this.toolMicros;
  }

  /** OpenAI's usage object for the whole request. */
  usage(): CompletionUsage {
    const { inputTokens, outputTokens, cachedTokens } = this.tokens;
    return {
      prompt_tokens: inputTokens,
      completion_tokens: outputTokens,
      total_tokens: inputTokens + outputTokens,
      ...(cachedTokens > 0 ? { prompt_tokens_details: { cached_tokens: cachedTokens } } : {}),
    };
  }
}

export function toTokenCounts(usage: CompletionUsage): TokenCounts {
  return {
    inputTokens: usage.prompt_tokens ?? 0,
    outputTokens: usage.completion_tokens ?? 0,
    cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
  };
}
