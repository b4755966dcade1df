import { readFileSync } from 'node:fs';
import { UPSTREAM_PROVIDERS } from '../config/app-config';

/** The upstream providers of the configuration (UPSTREAM_PROVIDERS), and the built-in simulator. */
export const PROVIDER_NAMES = [...UPSTREAM_PROVIDERS.map(([name]) => name), 'simulator'] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];

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
  inputPrice: number;
  outputPrice: number;
  cachedInputPrice: number;
}

/**
 * The spec's eight models: three of 128000 tokens, three of 200000, two of 1000000, from
 * three providers, at the providers' list prices. `MODEL_CATALOG_FILE` replaces the list.
 */
export const DEFAULT_CATALOG: readonly ModelDefinition[] = [
  model('gpt-4o', 'openai', 1715367049, 128_000, 16_384, 250_000, 1_000_000, 125_000),
  model('gpt-4o-mini', 'openai', 1721172741, 128_000, 16_384, 15_000, 60_000, 7_500),
  model('gpt-4-turbo', 'openai', 1712361441, 128_000, 4_096, 1_000_000, 3_000_000, 1_000_000),
  model('o4-mini', 'openai', 1744225351, 200_000, 100_000, 110_000, 440_000, 27_500),
  // Sonnet 4.5 reaches its end of life on 2026-11-30; 4.6 replaces it at the same prices.
  model('claude-sonnet-4-6', 'anthropic', 1795305600, 200_000, 64_000, 300_000, 1_500_000, 30_000),
  model('claude-haiku-4-5', 'anthropic', 1760486400, 200_000, 64_000, 100_000, 500_000, 10_000),
  model('gemini-2.5-pro', 'google', 1750118400, 1_000_000, 65_536, 125_000, 1_000_000, 31_250),
  model('gemini-2.5-flash', 'google', 1750118400, 1_000_000, 65_536, 30_000, 250_000, 7_500),
];

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
    inputPrice,
    outputPrice,
    cachedInputPrice,
  };
}

/** Reads a catalog file (docs/architecture.md, "Configuration (contract)"; format in docs/api.md, "Models"), naming every problem at once. */
export function loadCatalogFile(file: string): ModelDefinition[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new Error(`MODEL_CATALOG_FILE ${file} could not be read as JSON: ${(error as Error).message}`);
  }
  const entries = (parsed as { models?: unknown })?.models;
  if (!Array.isArray(entries) || entries.length === 0) {
    throw new Error(`MODEL_CATALOG_FILE ${file} must be {"models": [...]} with at least one model`);
  }
  const problems: string[] = [];
  const models = entries.map((entry, index) => parseEntry(entry, `models[${index}]`, problems));
  const ids = new Set<string>();
  for (const m of models) {
    if (ids.has(m.id)) problems.push(`model id "${m.id}" appears twice`);
    ids.add(m.id);
  }
  if (problems.length > 0) throw new Error(`MODEL_CATALOG_FILE ${file} is invalid:\n  - ${problems.join('\n  - ')}`);
  return models;
}

function parseEntry(entry: unknown, at: string, problems: string[]): ModelDefinition {
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
  const flag = (name: string): boolean => {
    const value = e[name] ?? true;
    if (typeof value !== 'boolean') problems.push(`${at}.${name} must be true or false`);
    return Boolean(value);
  };
  const id = text('id');
  const provider = text('provider') as ProviderName;
  if (!PROVIDER_NAMES.includes(provider)) problems.push(`${at}.provider must be one of ${PROVIDER_NAMES.join(', ')}`);
  const inputPrice = count('input_price');
  return {
    id,
    provider,
    upstreamModel: text('upstream_model', id),
    ownedBy: text('owned_by', provider),
    created: count('created', 1_700_000_000),
    contextLength: count('context_length'),
    maxOutputTokens: count('max_output_tokens', 4_096),
    vision: flag('vision'),
    functionCalling: flag('function_calling'),
    inputPrice,
    outputPrice: count('output_price'),
    cachedInputPrice: count('cached_input_price', inputPrice),
  };
}
