import type OpenAI from 'openai';
import { ApiError } from '../../common/errors/api-error';
import type { ProviderRequest } from '../provider-adapter';

/**
 * The chat-completion parameters forwarded upstream, beside those the service sets itself
 * (model, messages, tools, temperature, the output cap, stream). Billing multiplies the
 * provider's token counts by the catalog's prices, so none of these may change what a token
 * costs or add a charge of another kind; `service_tier` and `modalities` only pass with the
 * values `checkOpenAiParameters` accepts. Every other field is dropped: `store` and
 * `metadata` (completions stored in the operator's account), `prompt_cache_key`, `best_of`,
 * and parameters of particular servers such as `top_k`.
 */
export const FORWARDED_PARAMETERS: ReadonlySet<string> = new Set([
  'frequency_penalty',
  'function_call',
  'functions',
  'logit_bias',
  'logprobs',
  'modalities',
  'n',
  'parallel_tool_calls',
  'presence_penalty',
  'reasoning_effort',
  'response_format',
  'safety_identifier',
  'seed',
  'service_tier',
  'stop',
  'tool_choice',
  'top_logprobs',
  'top_p',
  'user',
  'verbosity',
]);

/** Service tiers billed at the standard prices the catalog holds. */
const STANDARD_SERVICE_TIERS = ['auto', 'default'];

/**
 * Refuses (400, code `unsupported_parameter`, `param` the field) what would be billed beyond
 * the catalog's token prices or change the kind of answer: a paid service tier, audio output,
 * web search, predicted outputs. Runs before any money is held (`checkRequest`).
 */
export function checkOpenAiParameters(extra: Record<string, unknown>): void {
  const refuse = (param: string, message: string) => {
    throw ApiError.badRequest(message, param, 'unsupported_parameter');
  };
  const given = (name: string) => extra[name] !== undefined && extra[name] !== null;
  if (given('service_tier') && !STANDARD_SERVICE_TIERS.includes(extra.service_tier as string)) {
    refuse('service_tier', 'service_tier must be "auto" or "default": requests are billed at the standard prices of GET /v1/models.');
  }
  if (given('modalities') && (!Array.isArray(extra.modalities) || extra.modalities.some((modality) => modality !== 'text'))) {
    refuse('modalities', 'modalities may only be ["text"]: this service answers in text, and bills text tokens only.');
  }
  if (given('audio')) refuse('audio', 'audio output is not supported: this service answers in text, and bills text tokens only.');
  if (given('web_search_options')) {
    refuse('web_search_options', "web_search_options is not supported: use an assistant with the web_search tool, billed at this service's price.");
  }
  if (given('prediction')) refuse('prediction', 'prediction (predicted outputs) is not supported: its rejected tokens would be billed beyond the hold.');
}

/** The forwarded parameters the client set (null counts as not set: the upstream default). */
export function forwardedParameters(extra: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(extra).filter(([name, value]) => FORWARDED_PARAMETERS.has(name) && value !== undefined && value !== null));
}

/**
 * The upstream request: the client's messages and tools as they came, the forwarded
 * parameters, and the output cap. `compatibleServer` is true for a BASE_URL other than OpenAI's.
 */
export function toOpenAiParams(request: ProviderRequest, compatibleServer: boolean): OpenAI.Chat.ChatCompletionCreateParamsNonStreaming {
  // The cap keeps the client's name for it. Without one: OpenAI itself wants
  // max_completion_tokens, while many compatible servers only know max_tokens.
  const capField = request.maxTokensField ?? (compatibleServer ? 'max_tokens' : 'max_completion_tokens');
  checkOpenAiParameters(request.extra);
  return {
    // Named first, the forwarded ones spread after (none of them is named here): see usageRecord (billing/usage-record.ts).
    model: request.model.upstreamModel,
    messages: request.messages,
    ...forwardedParameters(request.extra),
    ...(request.tools?.length ? { tools: request.tools } : {}),
    ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    [capField]: request.maxTokens,
  };
}
