import { readFileSync } from 'node:fs';
import { redactSecrets } from '../common/secrets';
import { ConfigError, UPSTREAM_PROVIDERS, type UpstreamProviderName } from '../config/app-config';
import { ASSISTANT_MODEL_PREFIX } from './assistant-models';

/** The upstream providers of the configuration (UPSTREAM_PROVIDERS), and the built-in simulator. */
export const PROVIDER_NAMES = [...UPSTREAM_PROVIDERS.map(([name]) => name), 'simulator'] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];

/** What a model does: answers chats (chat completions, Responses, Messages), or turns text into vectors (`/v1/embeddings`). */
export const MODEL_KINDS = ['chat', 'embedding'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];

/** A model of the curated catalog: who serves it, and what it costs (millicents per million tokens). */
export interface ModelDefinition {
  id: string;
  provider: ProviderName;
  upstreamModel: string;
  ownedBy: string;
  /** Unix seconds, as in OpenAI's model object. */
  created: number;
  contextLength: number;
  maxOutputTokens: number;
  vision: boolean;
  functionCalling: boolean;
  /**
   * The model reasons before it answers, and takes an effort for it (OpenAI's `reasoning_effort`,
   * Claude's and Gemini's thinking budgets): without it, `reasoning_effort` is not sent. Absent: false.
   */
  reasoning?: boolean;
  inputPrice: number;
  outputPrice: number;
  cachedInputPrice: number;
  /** Input tokens written to the provider's prompt cache: Anthropic's 5-minute cache writes, 1.25 times input. */
  cacheWritePrice: number;
  /**
   * Where the model is served: several deployments are balanced by weight and fail over to
   * each other (src/providers/routing). Absent: one, from the provider's single-key variables.
   */
  deployments?: DeploymentDefinition[];
  /** Catalog models tried, in order, when none of this one's deployments could answer; none costs more. */
  fallbacks?: string[];
  /**
   * Other names a request may give this model (`claude-sonnet-4-5` for a model of another
   * provider, so that Claude Code accepts it); each unique across the catalog's ids and aliases.
   */
  aliases?: string[];
  /** `chat` when absent. An embedding model bills input tokens only (its output price is 0). */
  kind?: ModelKind;
  /** An embedding model's native vector size, and whether a request may ask for fewer (`dimensions`). */
  embedding?: EmbeddingShape;
}

/** The vectors of an embedding model. */
export interface EmbeddingShape {
  dimensions: number;
  /** The request's `dimensions` (1 to the native size) is honoured: OpenAI's text-embedding-3-*, Gemini's outputDimensionality. */
  adjustableDimensions: boolean;
  /** The most tokens one input may have (8192 for OpenAI's); a longer input is refused with a 400. */
  maxInputTokens: number;
  /** The size of the model's tokenizer's vocabulary, where known: a token array's ids are below it (cl100k_base's for OpenAI's). */
  vocabularySize?: number;
}

/** Prices of a model, millicents per million tokens. */
export interface Prices {
  inputPrice: number;
  outputPrice: number;
  cachedInputPrice: number;
  cacheWritePrice: number;
}

/** One place a model is served: a provider's API at a base URL with a key, under an upstream name. */
export interface DeploymentDefinition {
  /** Unique within its model; names it in x_service, usage records, metrics and the CLI. */
  label: string;
  provider: UpstreamProviderName;
  baseUrl?: string;
  /** The secret, read at start from `keySource`; never shown. */
  apiKey: string;
  /** Where the key was read from (`env OPENAI_KEY_EU`, `file /run/secrets/k`): what may be shown. */
  keySource: string;
  upstreamModel: string;
  weight: number;
  /** Requests and tokens per minute this deployment may take, across every replica. */
  rpm?: number;
  tpm?: number;
  region?: string;
  /** Bounds one attempt here (a whole completion, or a stream's first chunk); UPSTREAM_TIMEOUT_MS when absent. */
  timeoutMs?: number;
  /** Its own prices, when they differ from the model's. */
  prices?: Prices;
}

/** cl100k_base, the tokenizer of OpenAI's embedding models: ids 0 to 100,276 (its special tokens last). */
const CL100K_VOCABULARY = 100_277;

/**
 * The spec's eight chat models: three of 128000 tokens, three of 200000, two of 1000000, from
 * three providers, then three embedding models (`/v1/embeddings`), at the providers' list
 * prices. `MODEL_CATALOG_FILE` replaces the list.
 */
export const DEFAULT_CATALOG: readonly ModelDefinition[] = [
  model('gpt-4o', 'openai', 1715367049, 128_000, 16_384, 250_000, 1_000_000, 125_000),
  model('gpt-4o-mini', 'openai', 1721172741, 128_000, 16_384, 15_000, 60_000, 7_500),
  model('gpt-4-turbo', 'openai', 1712361441, 128_000, 4_096, 1_000_000, 3_000_000, 1_000_000),
  reasons(model('o4-mini', 'openai', 1744225351, 200_000, 100_000, 110_000, 440_000, 27_500)),
  // Sonnet 4.5 reaches its end of life on 2026-11-30; 4.6 replaces it at the same prices.
  reasons(model('claude-sonnet-4-6', 'anthropic', 1795305600, 200_000, 64_000, 300_000, 1_500_000, 30_000)),
  reasons(model('claude-haiku-4-5', 'anthropic', 1760486400, 200_000, 64_000, 100_000, 500_000, 10_000)),
  reasons(model('gemini-2.5-pro', 'google', 1750118400, 1_000_000, 65_536, 125_000, 1_000_000, 31_250)),
  reasons(model('gemini-2.5-flash', 'google', 1750118400, 1_000_000, 65_536, 30_000, 250_000, 7_500)),
  embeddingModel('text-embedding-3-small', 'openai', 1705948997, 1_536, 8_192, 2_000, CL100K_VOCABULARY),
  embeddingModel('text-embedding-3-large', 'openai', 1705953180, 3_072, 8_192, 13_000, CL100K_VOCABULARY),
  embeddingModel('gemini-embedding-001', 'google', 1752537600, 3_072, 2_048, 15_000),
];

function reasons(definition: ModelDefinition): ModelDefinition {
  return { ...definition, reasoning: true };
}

/** Whether a model answers chats (every model the catalog does not mark `embedding`). */
export function isChatModel(model: ModelDefinition): boolean {
  return (model.kind ?? 'chat') === 'chat';
}

/** An embedding model at its provider's list price per million input tokens; the request's `dimensions` may lower its size. */
function embeddingModel(id: string, provider: ProviderName, created: number, dimensions: number, maxInputTokens: number, inputPrice: number, vocabularySize?: number): ModelDefinition {
  return {
    ...model(id, provider, created, maxInputTokens, 0, inputPrice, 0, inputPrice),
    vision: false,
    functionCalling: false,
    kind: 'embedding',
    embedding: { dimensions, adjustableDimensions: true, maxInputTokens, ...(vocabularySize ? { vocabularySize } : {}) },
  };
}

function model(
  id: string,
  provider: ProviderName,
  created: number,
  contextLength: number,
  maxOutputTokens: number,
  inputPrice: number,
  outputPrice: number,
  cachedInputPrice: number,
): ModelDefinition {
  return {
    id,
    provider,
    upstreamModel: id,
    ownedBy: provider,
    created,
    contextLength,
    maxOutputTokens,
    vision: true,
    functionCalling: true,
    reasoning: false,
    inputPrice,
    outputPrice,
    cachedInputPrice,
    cacheWritePrice: defaultCacheWritePrice(provider, inputPrice),
  };
}

/** Anthropic bills a (5-minute) prompt cache write at 1.25 times input; the others' caches cost nothing to write. */
export function defaultCacheWritePrice(provider: string, inputPrice: number): number {
  return provider === 'anthropic' ? Math.ceil((inputPrice * 5) / 4) : inputPrice;
}

/**
 * Reads a catalog file (docs/architecture.md, "Configuration (contract)"; format in docs/api.md,
 * "Models"), naming every problem at once in a ConfigError: the start prints it alone and exits.
 * Anything shaped like a key is masked in it, since the file is where keys get pasted by mistake.
 */
export function loadCatalogFile(file: string, env: NodeJS.ProcessEnv = process.env): ModelDefinition[] {
  const refuse = (problems: string[]) => new ConfigError(problems.map(redactSecrets), `MODEL_CATALOG_FILE ${redactSecrets(file)} is invalid`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw refuse([`it could not be read as JSON: ${(error as Error).message}`]);
  }
  const entries = (parsed as { models?: unknown })?.models;
  if (!Array.isArray(entries) || entries.length === 0) {
    throw refuse(['it must be {"models": [...]} with at least one model']);
  }
  const problems: string[] = [];
  const models = entries.map((entry, index) => parseEntry(entry, `models[${index}]`, problems, env));
  const ids = new Set<string>();
  for (const m of models) {
    if (ids.has(m.id)) problems.push(`model id "${m.id}" appears twice`);
    ids.add(m.id);
  }
  models.forEach((m, index) => checkFallbacks(m, `models[${index}] ("${m.id}")`, models, problems));
  checkAliases(models, problems);
  if (problems.length > 0) throw refuse(problems);
  return models;
}

function parseEntry(entry: unknown, at: string, problems: string[], env: NodeJS.ProcessEnv): ModelDefinition {
  const e = (typeof entry === 'object' && entry !== null ? entry : {}) as Record<string, unknown>;
  const text = (name: string, fallback?: string): string => {
    const value = e[name] ?? fallback;
    if (typeof value !== 'string' || value.trim() === '') problems.push(`${at}.${name} must be a non-empty string`);
    return String(value ?? '');
  };
  const count = (name: string, fallback?: number): number => {
    const value = e[name] ?? fallback;
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
      problems.push(`${at}.${name} must be a whole number >= 0`);
    }
    return Number(value);
  };
  const flag = (name: string, fallback = true): boolean => {
    const value = e[name] ?? fallback;
    if (typeof value !== 'boolean') problems.push(`${at}.${name} must be true or false`);
    return Boolean(value);
  };
  const id = text('id');
  const deploymentsAt = `${at} ("${String(e.id)}").deployments`;
  const deployments = e.deployments === undefined ? undefined : parseDeployments(e.deployments, deploymentsAt, String(e.upstream_model ?? e.id ?? ''), problems, env);
  const provider = text('provider', deployments?.[0]?.provider) as ProviderName;
  if (!PROVIDER_NAMES.includes(provider)) problems.push(`${at}.provider must be one of ${PROVIDER_NAMES.join(', ')}`);
  if (deployments && provider === 'simulator') problems.push(`${at}: the simulator has no deployments`);
  const inputPrice = count('input_price');
  const fallbacks = e.fallbacks === undefined ? undefined : e.fallbacks;
  if (fallbacks !== undefined && (!Array.isArray(fallbacks) || fallbacks.some((f) => typeof f !== 'string'))) {
    problems.push(`${at}.fallbacks must be a list of model ids`);
  }
  const kind = (e.kind ?? 'chat') as ModelKind;
  if (!MODEL_KINDS.includes(kind)) problems.push(`${at}.kind must be one of ${MODEL_KINDS.join(', ')}`);
  const embedding = kind === 'embedding' ? parseEmbeddingShape(e, at, problems) : undefined;
  const aliases = e.aliases;
  const validAliases = Array.isArray(aliases) && aliases.every((alias) => typeof alias === 'string' && alias.trim() !== '');
  if (aliases !== undefined && !validAliases) problems.push(`${at} ("${String(e.id)}").aliases must be a list of non-empty names`);
  return {
    id,
    provider,
    upstreamModel: text('upstream_model', id),
    ownedBy: text('owned_by', provider),
    created: count('created', 1_700_000_000),
    contextLength: count('context_length', embedding?.maxInputTokens),
    maxOutputTokens: count('max_output_tokens', embedding ? 0 : 4_096),
    vision: embedding ? false : flag('vision'),
    functionCalling: embedding ? false : flag('function_calling'),
    reasoning: embedding ? false : flag('reasoning', false),
    inputPrice,
    outputPrice: count('output_price', embedding ? 0 : undefined),
    cachedInputPrice: count('cached_input_price', inputPrice),
    cacheWritePrice: count('cache_write_price', defaultCacheWritePrice(deployments?.[0]?.provider ?? provider, inputPrice)),
    ...(deployments ? { deployments } : {}),
    ...(Array.isArray(fallbacks) ? { fallbacks: fallbacks as string[] } : {}),
    ...(embedding ? { kind, embedding } : {}),
    ...(Array.isArray(aliases) ? { aliases: (aliases as unknown[]).filter((alias): alias is string => typeof alias === 'string' && alias.trim() !== '') } : {}),
  };
}

/**
 * `dimensions` (the native size, required), `adjustable_dimensions` (whether a request may ask
 * for fewer; false unless said), `max_input_tokens` (per input; 8192 unless said) and
 * `vocabulary_size` (token arrays' ids are below it; unchecked unless said) of an embedding model.
 */
function parseEmbeddingShape(e: Record<string, unknown>, at: string, problems: string[]): EmbeddingShape {
  const whole = (name: string, fallback?: number): number => {
    const value = e[name] ?? fallback;
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) problems.push(`${at}.${name} must be a whole number >= 1 for an embedding model`);
    return Number(value);
  };
  const adjustable = e.adjustable_dimensions ?? false;
  if (typeof adjustable !== 'boolean') problems.push(`${at}.adjustable_dimensions must be true or false`);
  const { output_price: outputPrice } = e;
  if (outputPrice !== undefined && outputPrice !== 0) problems.push(`${at}.output_price must be 0 for an embedding model (it bills input tokens only)`);
  const vocabularySize = e.vocabulary_size === undefined ? undefined : whole('vocabulary_size');
  return {
    dimensions: whole('dimensions'),
    adjustableDimensions: adjustable === true,
    maxInputTokens: whole('max_input_tokens', 8_192),
    ...(vocabularySize !== undefined ? { vocabularySize } : {}),
  };
}

const DEPLOYMENT_FIELDS = new Set([
  'label', 'provider', 'base_url', 'api_key_env', 'api_key_file', 'upstream_model', 'weight', 'rpm', 'tpm', 'region', 'timeout_ms',
  'input_price', 'output_price', 'cached_input_price', 'cache_write_price',
]);
const LABEL = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function parseDeployments(value: unknown, at: string, upstreamModel: string, problems: string[], env: NodeJS.ProcessEnv): DeploymentDefinition[] {
  if (!Array.isArray(value) || value.length === 0) {
    problems.push(`${at} must be a list of at least one deployment`);
    return [];
  }
  const labels = new Set<string>();
  return value.map((entry, index) => {
    const d = (typeof entry === 'object' && entry !== null ? entry : {}) as Record<string, unknown>;
    const where = `${at}[${index}]${typeof d.label === 'string' ? ` ("${d.label}")` : ''}`;
    for (const key of Object.keys(d)) {
      if (key === 'api_key') problems.push(`${where}.api_key: the key itself does not belong in the catalog; name its variable (api_key_env) or file (api_key_file)`);
      else if (!DEPLOYMENT_FIELDS.has(key)) problems.push(`${where}.${key} is not a deployment field`);
    }
    const provider = d.provider as UpstreamProviderName;
    if (!UPSTREAM_PROVIDERS.some(([name]) => name === provider)) {
      problems.push(`${where}.provider must be one of ${UPSTREAM_PROVIDERS.map(([name]) => name).join(', ')}`);
    }
    const label = d.label ?? (value.length === 1 ? String(provider) : `${String(provider)}-${index + 1}`);
    if (typeof label !== 'string' || !LABEL.test(label)) problems.push(`${where}.label must be 1 to 64 letters, digits, '.', '_', ':' or '-'`);
    else if (labels.has(label)) problems.push(`${where}.label "${label}" appears twice in this model`);
    labels.add(String(label));
    const whole = (name: string, min: number): number | undefined => {
      const v = d[name];
      if (v === undefined) return undefined;
      if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
        problems.push(`${where}.${name} must be a whole number >= ${min}`);
        return undefined;
      }
      return v;
    };
    const key = readKey(d, where, problems, env);
    const baseUrl = d.base_url;
    if (baseUrl !== undefined && (typeof baseUrl !== 'string' || !/^https?:\/\/[^/]/.test(baseUrl) || !URL.canParse(baseUrl))) {
      problems.push(`${where}.base_url must be an http(s) URL`);
    }
    if (d.upstream_model !== undefined && (typeof d.upstream_model !== 'string' || d.upstream_model.trim() === '')) {
      problems.push(`${where}.upstream_model must be a non-empty string`);
    }
    if (d.region !== undefined && typeof d.region !== 'string') problems.push(`${where}.region must be a string`);
    const input = whole('input_price', 0);
    const output = whole('output_price', 0);
    const cached = whole('cached_input_price', 0);
    const cacheWrite = whole('cache_write_price', 0);
    if ((input === undefined) !== (output === undefined)) problems.push(`${where}: input_price and output_price go together`);
    const rpm = whole('rpm', 1);
    const tpm = whole('tpm', 1);
    const timeoutMs = whole('timeout_ms', 100);
    return {
      label: String(label),
      provider,
      ...(typeof baseUrl === 'string' ? { baseUrl } : {}),
      apiKey: key.secret,
      keySource: key.source,
      upstreamModel: typeof d.upstream_model === 'string' ? d.upstream_model : upstreamModel,
      weight: whole('weight', 1) ?? 1,
      ...(rpm !== undefined ? { rpm } : {}),
      ...(tpm !== undefined ? { tpm } : {}),
      ...(typeof d.region === 'string' ? { region: d.region } : {}),
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      ...(input !== undefined && output !== undefined ? { prices: { inputPrice: input, outputPrice: output, cachedInputPrice: cached ?? input, cacheWritePrice: cacheWrite ?? defaultCacheWritePrice(provider, input) } } : {}),
    };
  });
}

/** A deployment's key, from the variable or the file it names (exactly one); the secret never appears in a message. */
function readKey(d: Record<string, unknown>, where: string, problems: string[], env: NodeJS.ProcessEnv): { secret: string; source: string } {
  const { api_key_env: variable, api_key_file: file } = d;
  if ((variable === undefined) === (file === undefined)) {
    problems.push(`${where} needs exactly one of api_key_env (a variable's name) and api_key_file (a file's path)`);
    return { secret: '', source: '' };
  }
  if (variable !== undefined) {
    // Not echoed: what is not a variable's name is most often the key itself, pasted.
    if (typeof variable !== 'string' || !ENV_NAME.test(variable)) {
      problems.push(`${where}.api_key_env must name an environment variable (letters, digits and _), not hold a key`);
      return { secret: '', source: '' };
    }
    const secret = env[variable]?.trim() ?? '';
    if (secret === '') problems.push(`${where}.api_key_env: the variable ${variable} is not set`);
    return { secret, source: `env ${variable}` };
  }
  if (typeof file !== 'string' || file === '') {
    problems.push(`${where}.api_key_file must be a file's path`);
    return { secret: '', source: '' };
  }
  let secret = '';
  try {
    secret = readFileSync(file, 'utf8').trim();
  } catch (error) {
    problems.push(`${where}.api_key_file: ${file} could not be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    return { secret: '', source: `file ${file}` };
  }
  if (secret === '') problems.push(`${where}.api_key_file: ${file} is empty`);
  return { secret, source: `file ${file}` };
}

/**
 * A name runs one model: an alias is no model's id, no other alias, and not an assistant's
 * `assistant/<slug>` (which it would hide).
 */
function checkAliases(models: ModelDefinition[], problems: string[]): void {
  const ids = new Set(models.map((m) => m.id));
  const owners = new Map<string, ModelDefinition>();
  models.forEach((model, index) => {
    const at = `models[${index}] ("${model.id}").aliases`;
    for (const alias of model.aliases ?? []) {
      const owner = owners.get(alias);
      if (alias === model.id) problems.push(`${at}: "${alias}" is the model's own id`);
      else if (ids.has(alias)) problems.push(`${at}: "${alias}" is already the id of a model`);
      else if (alias.startsWith(ASSISTANT_MODEL_PREFIX)) problems.push(`${at}: "${alias}" would name an assistant (${ASSISTANT_MODEL_PREFIX}<slug>)`);
      else if (owner === model) problems.push(`${at}: "${alias}" appears twice`);
      else if (owner) problems.push(`${at}: "${alias}" is already an alias of "${owner.id}"`);
      owners.set(alias, owner ?? model);
    }
  });
}

/** Fallbacks name other models of the catalog, none dearer than the model they stand in for. */
function checkFallbacks(model: ModelDefinition, at: string, models: ModelDefinition[], problems: string[]): void {
  for (const id of model.fallbacks ?? []) {
    const fallback = models.find((m) => m.id === id);
    if (!fallback) problems.push(`${at}.fallbacks: "${id}" is not a model of the catalog`);
    else if (fallback === model) problems.push(`${at}.fallbacks: a model cannot fall back on itself`);
    else if (isChatModel(fallback) !== isChatModel(model)) problems.push(`${at}.fallbacks: "${id}" is not of the same kind (chat or embedding)`);
    else if (fallback.inputPrice > model.inputPrice || fallback.outputPrice > model.outputPrice) {
      problems.push(`${at}.fallbacks: "${id}" costs more than "${model.id}" (a fallback is of the same or a lower price)`);
    }
  }
}
