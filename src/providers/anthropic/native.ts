import type { ProviderRequest } from '../provider-adapter';

/**
 * A Messages request sent to Anthropic as the client wrote it (ProviderRequest.native): its
 * blocks untouched (thinking and signatures, redacted_thinking, cache_control, documents and
 * citations, system blocks), with the deployment's model id and the call's output cap. Only
 * what Anthropic would refuse, or bill beyond the catalog's token prices, is left out; see
 * docs/api.md, "Anthropic Messages API".
 */

/**
 * The `anthropic-beta` flags forwarded upstream: features Anthropic bills by tokens at the
 * catalog's prices. Others are dropped, never refused: unknown ones, and those that change the
 * price (context-1m: long-context rates; extended-cache-ttl: dearer cache writes) or reach
 * outside the request (files, MCP, code execution).
 */
export const FORWARDED_BETA_FLAGS: ReadonlySet<string> = new Set([
  'prompt-caching-2024-07-31',
  'interleaved-thinking-2025-05-14',
  'token-counting-2024-11-01',
  'context-management-2025-06-27',
  'fine-grained-tool-streaming-2025-05-14',
  'output-128k-2025-02-19',
  'token-efficient-tools-2025-02-19',
  'pdfs-2024-09-25',
  'effort-2025-11-24',
  // defer_loading tools and tool_reference results, which Claude Code sends for its tool search.
  'advanced-tool-use-2025-11-20',
]);

/** Top-level fields sent as they came; `context_management` only with its beta flag (Anthropic refuses it without). */
const CREATE_FIELDS = ['messages', 'system', 'metadata', 'stop_sequences', 'temperature', 'top_p', 'top_k', 'tools', 'tool_choice', 'thinking', 'output_config', 'cache_control'];
const COUNT_FIELDS = ['messages', 'system', 'tools', 'tool_choice', 'thinking', 'output_config', 'cache_control'];
const GATED_FIELDS: Record<string, string> = { context_management: 'context-management-2025-06-27' };

/** The smallest thinking budget Anthropic takes. */
const MIN_THINKING_BUDGET = 1024;

export interface NativeCall {
  params: Record<string, unknown>;
  /** The `anthropic-beta` header, or undefined without a flag to forward. */
  headers: { 'anthropic-beta'?: string };
}

/** The forwarded flags of a client's `anthropic-beta` values (each may hold several, comma-separated). */
export function forwardedBetaFlags(beta: readonly string[]): string[] {
  const flags = beta.flatMap((value) => value.split(',')).map((flag) => flag.trim());
  return [...new Set(flags.filter((flag) => FORWARDED_BETA_FLAGS.has(flag)))];
}

/**
 * The body and headers of a native call, or undefined when the request cannot go as it came
 * and is translated instead: a `system` message inside `messages` (Claude Code's for models it
 * does not take for Claude) has no place in Anthropic's format.
 */
export function nativeCall(request: ProviderRequest, stream: boolean): NativeCall | undefined {
  const native = request.native?.anthropic;
  if (!native || !sendable(native.body)) return undefined;
  const betas = forwardedBetaFlags(native.beta);
  const params: Record<string, unknown> = { model: request.model.upstreamModel, max_tokens: request.maxTokens, ...pick(native.body, CREATE_FIELDS, betas) };
  withCustomToolsOnly(params);
  fitThinkingBudget(params, request.maxTokens);
  withFiveMinuteCacheWrites(params);
  if (stream) params.stream = true;
  return { params, headers: betas.length > 0 ? { 'anthropic-beta': betas.join(',') } : {} };
}

/** The count_tokens body of a native request (no max_tokens, metadata or sampling), and its headers. */
export function nativeCountCall(request: Pick<ProviderRequest, 'model' | 'native'>): NativeCall | undefined {
  const native = request.native?.anthropic;
  if (!native || !sendable(native.body)) return undefined;
  const betas = forwardedBetaFlags(native.beta);
  const params: Record<string, unknown> = { model: request.model.upstreamModel, ...pick(native.body, COUNT_FIELDS, betas) };
  withCustomToolsOnly(params);
  return { params, headers: betas.length > 0 ? { 'anthropic-beta': betas.join(',') } : {} };
}

function sendable(body: Record<string, unknown>): boolean {
  return Array.isArray(body.messages) && body.messages.every((message) => (message as { role?: unknown })?.role !== 'system');
}

function pick(body: Record<string, unknown>, fields: readonly string[], betas: readonly string[]): Record<string, unknown> {
  const picked: Record<string, unknown> = {};
  for (const field of fields) if (body[field] !== undefined) picked[field] = body[field];
  for (const [field, flag] of Object.entries(GATED_FIELDS)) if (body[field] !== undefined && betas.includes(flag)) picked[field] = body[field];
  return picked;
}

/**
 * Custom tools only, as the translation offers: Anthropic's server tools (web search, code
 * execution...) are billed per use outside the catalog's token prices, and are dropped. A
 * tool_choice left with nothing to choose goes with them.
 */
function withCustomToolsOnly(params: Record<string, unknown>): void {
  if (!Array.isArray(params.tools)) return;
  const tools = params.tools.filter((tool: { type?: unknown }) => tool?.type === undefined || tool.type === null || tool.type === 'custom');
  if (tools.length === params.tools.length) return;
  const names = new Set(tools.map((tool: { name?: unknown }) => tool.name));
  const choice = params.tool_choice as { type?: unknown; name?: unknown } | undefined;
  if (tools.length > 0) params.tools = tools;
  else delete params.tools;
  if (choice && (tools.length === 0 || (choice.type === 'tool' && !names.has(choice.name)))) delete params.tool_choice;
}

/**
 * Cache writes at the catalog's cache_write_price, Anthropic's 5-minute one: a `ttl` of an hour
 * (billed at twice input) is dropped from each `cache_control`, which then caches for 5 minutes.
 * Copies only what it changes: the client's body stays as it came.
 */
function withFiveMinuteCacheWrites(params: Record<string, unknown>): void {
  const fitted = (value: unknown): unknown => {
    if (Array.isArray(value)) {
      const items = value.map(fitted);
      return items.some((item, i) => item !== value[i]) ? items : value;
    }
    if (typeof value !== 'object' || value === null) return value;
    const object = value as Record<string, unknown>;
    let copy: Record<string, unknown> | undefined;
    for (const [key, field] of Object.entries(object)) {
      const next = key === 'cache_control' ? withoutLongTtl(field) : fitted(field);
      if (next !== field) (copy ??= { ...object })[key] = next;
    }
    return copy ?? object;
  };
  for (const field of ['system', 'tools', 'messages', 'cache_control']) {
    if (params[field] === undefined) continue;
    params[field] = field === 'cache_control' ? withoutLongTtl(params[field]) : fitted(params[field]);
  }
}

function withoutLongTtl(cacheControl: unknown): unknown {
  const control = cacheControl as { ttl?: unknown } | null;
  if (typeof control !== 'object' || control === null || control.ttl === undefined || control.ttl === '5m') return cacheControl;
  const { ttl: _ttl, ...rest } = control;
  return rest;
}

/** Anthropic wants the thinking budget below max_tokens: a cap lowered by the service lowers the budget, or turns thinking off. */
function fitThinkingBudget(params: Record<string, unknown>, maxTokens: number): void {
  const thinking = params.thinking as { type?: unknown; budget_tokens?: unknown } | undefined;
  if (thinking?.type !== 'enabled' || typeof thinking.budget_tokens !== 'number' || thinking.budget_tokens < maxTokens) return;
  if (maxTokens - 1 >= MIN_THINKING_BUDGET) params.thinking = { ...thinking, budget_tokens: maxTokens - 1 };
  else delete params.thinking;
}
