import type { AssistantFields } from '../../assistants/assistants.service';
import type { Assistant, AssistantTool, ServerToolType } from '../../assistants/entities/assistant.entity';
import type { Document } from '../../assistants/documents/entities/document.entity';
import { ASSISTANT_CHUNKING, DEFAULT_CHUNKING, MAX_CHUNK_TOKENS, MIN_CHUNK_TOKENS } from '../../assistants/documents/chunking';
import { formatBytes } from '../../assistants/documents/document-limits';
import type { ModelDefinition } from '../../models/model-catalog';
import type { ServerToolDescriptor } from '../../tools/server-tool';
import { formatDateTime, formatMillicents } from '../format';

export const NAME_MAX_LENGTH = 100;
export const DESCRIPTION_MAX_LENGTH = 1000;
/** The form is posted urlencoded, within the dashboard's 100 kB body limit. */
export const SYSTEM_PROMPT_MAX_LENGTH = 50_000;

/** A server tool as the editor offers it: a switch named `tool_<type>`, its label and help line. */
export interface ToolSwitch {
  type: ServerToolType;
  label: string;
  help: string;
}

/** The registered server tools (ToolsService's descriptors) as the editor's switches, in the order of their names. */
export function toolSwitches(tools: readonly ServerToolDescriptor[]): ToolSwitch[] {
  return tools
    .map(({ name, label, help }) => ({ type: name as ServerToolType, label, help }))
    .sort((a, b) => (a.type < b.type ? -1 : a.type > b.type ? 1 : 0));
}

/** The editor's fields as typed (strings), to show them again with the errors. */
export interface AssistantFormValues {
  name: string;
  slug: string;
  description: string;
  system_prompt: string;
  model: string;
  /** '' for the workspace's. */
  embedding_model: string;
  temperature: string;
  max_tokens: string;
  max_tool_iterations: string;
  chunk_max_tokens: string;
  chunk_overlap_tokens: string;
  tools: ServerToolType[];
  /** file_search's options: a count, a score threshold and the filters' JSON; empty for none. */
  file_search_max_num_results: string;
  file_search_score_threshold: string;
  file_search_filters: string;
}

/** The form's file_search option fields of stored settings. */
function fileSearchValues(tools: readonly AssistantTool[]): Pick<AssistantFormValues, 'file_search_max_num_results' | 'file_search_score_threshold' | 'file_search_filters'> {
  const settings = tools.find((tool) => tool.type === 'file_search');
  const threshold = settings?.ranking_options?.score_threshold;
  return {
    file_search_max_num_results: settings?.max_num_results === undefined ? '' : String(settings.max_num_results),
    file_search_score_threshold: threshold === undefined ? '' : String(threshold),
    file_search_filters: settings?.filters ? JSON.stringify(settings.filters, null, 2) : '',
  };
}

export type AssistantForm = { ok: true; fields: AssistantFields } | { ok: false; errors: Record<string, string> };

/** The values of a posted form; a checkbox that is not ticked is not sent. */
export function formValues(form: Record<string, string | string[] | undefined>, switches: readonly ToolSwitch[]): AssistantFormValues {
  const text = (name: string): string => {
    const value = form[name];
    return typeof value === 'string' ? value : '';
  };
  return {
    name: text('name'),
    slug: text('slug'),
    description: text('description'),
    system_prompt: text('system_prompt'),
    model: text('model'),
    embedding_model: text('embedding_model'),
    temperature: text('temperature'),
    max_tokens: text('max_tokens'),
    max_tool_iterations: text('max_tool_iterations'),
    chunk_max_tokens: text('chunk_max_tokens'),
    chunk_overlap_tokens: text('chunk_overlap_tokens'),
    tools: switches.filter((tool) => form[`tool_${tool.type}`] !== undefined).map((tool) => tool.type),
    file_search_max_num_results: text('file_search_max_num_results'),
    file_search_score_threshold: text('file_search_score_threshold'),
    file_search_filters: text('file_search_filters'),
  };
}

/** An assistant's stored values in the editor's form. */
export function valuesOf(assistant: Assistant): AssistantFormValues {
  return {
    name: assistant.name,
    slug: assistant.slug,
    description: assistant.description,
    system_prompt: assistant.systemPrompt,
    model: assistant.model,
    embedding_model: assistant.embeddingModel ?? '',
    temperature: assistant.temperature === null ? '' : String(assistant.temperature),
    max_tokens: assistant.maxTokens === null ? '' : String(assistant.maxTokens),
    max_tool_iterations: String(assistant.maxToolIterations),
    chunk_max_tokens: String(assistant.chunkMaxTokens),
    chunk_overlap_tokens: String(assistant.chunkOverlapTokens),
    tools: assistant.tools.map((tool) => tool.type),
    ...fileSearchValues(assistant.tools),
  };
}

/** A new assistant's form: the first model, file_search on (most assistants answer from documents). */
export function newAssistantValues(models: readonly ModelDefinition[]): AssistantFormValues {
  const model = models.find((m) => m.id === 'gpt-4o-mini') ?? models.find((m) => m.functionCalling) ?? models[0];
  return {
    name: '',
    slug: '',
    description: '',
    system_prompt: '',
    model: model?.id ?? '',
    embedding_model: '',
    temperature: '',
    max_tokens: '',
    max_tool_iterations: '5',
    chunk_max_tokens: String(ASSISTANT_CHUNKING.maxTokens),
    chunk_overlap_tokens: String(ASSISTANT_CHUNKING.overlapTokens),
    tools: ['file_search'],
    ...fileSearchValues([]),
  };
}

/**
 * Reads the editor's form into the service's fields. Only what the form itself knows is
 * checked here (a number is a number, lengths, the model is in the catalog); the service
 * checks the rest (slug syntax, ranges, the tier's limit), the same rules as for the CLI.
 * `current`: the tools the assistant has, whose settings (max_results) a save keeps.
 */
export function readAssistantForm(
  values: AssistantFormValues,
  models: readonly ModelDefinition[],
  current: readonly AssistantTool[] = [],
): AssistantForm {
  const errors: Record<string, string> = {};
  const name = values.name.trim();
  if (!name) errors.name = 'Give the assistant a name.';
  else if (name.length > NAME_MAX_LENGTH) errors.name = `A name has at most ${NAME_MAX_LENGTH} characters.`;
  const slug = values.slug.trim();
  if (values.description.length > DESCRIPTION_MAX_LENGTH) errors.description = `A description has at most ${DESCRIPTION_MAX_LENGTH} characters.`;
  if (values.system_prompt.length > SYSTEM_PROMPT_MAX_LENGTH) {
    errors.system_prompt = `A system prompt has at most ${SYSTEM_PROMPT_MAX_LENGTH.toLocaleString('en-US')} characters.`;
  }
  if (!models.some((model) => model.id === values.model)) errors.model = 'Choose one of the models of the list.';

  const temperature = optionalNumber(values.temperature);
  if (Number.isNaN(temperature)) errors.temperature = 'temperature must be a number from 0 to 2, or empty for the model\'s default.';
  const maxTokens = optionalNumber(values.max_tokens);
  if (Number.isNaN(maxTokens)) errors.max_tokens = 'max_tokens must be a whole number, or empty for the model\'s default.';
  const iterations = optionalNumber(values.max_tool_iterations);
  if (iterations === null || Number.isNaN(iterations)) errors.max_tool_iterations = 'max_tool_iterations must be a whole number from 1 to 20.';
  const count = optionalNumber(values.file_search_max_num_results);
  if (Number.isNaN(count)) errors.file_search_max_num_results = 'max_num_results must be a whole number from 1 to 50, or empty for 5.';
  const threshold = optionalNumber(values.file_search_score_threshold);
  if (Number.isNaN(threshold)) errors.file_search_score_threshold = 'The score threshold must be a number from 0 to 1, or empty for none.';
  let filters: unknown = null;
  if (values.file_search_filters.trim()) {
    try {
      filters = JSON.parse(values.file_search_filters);
    } catch {
      errors.file_search_filters = 'The filters must be JSON: {"type": "eq", "key": "type", "value": "pdf"}, or empty for none.';
    }
  }
  // Empty keeps the current value (a new assistant's: the default); the ranges, and the
  // overlap against the size, are the service's to check.
  const chunkMaxTokens = optionalNumber(values.chunk_max_tokens);
  if (Number.isNaN(chunkMaxTokens)) errors.chunk_max_tokens = `chunk_max_tokens must be a whole number from ${MIN_CHUNK_TOKENS} to ${MAX_CHUNK_TOKENS}.`;
  const chunkOverlapTokens = optionalNumber(values.chunk_overlap_tokens);
  if (Number.isNaN(chunkOverlapTokens)) errors.chunk_overlap_tokens = 'chunk_overlap_tokens must be a whole number, at most half of chunk_max_tokens.';

  if (Object.keys(errors).length > 0) return { ok: false, errors };
  const tools: AssistantTool[] = values.tools.map((type) => {
    const settings: AssistantTool = current.find((tool) => tool.type === type) ?? { type };
    if (type !== 'file_search') return settings;
    // The form says every option: an empty field removes it. The service checks the values.
    const { max_num_results: _count, ranking_options: _ranking, filters: _filters, ...kept } = settings;
    return {
      ...kept,
      ...(count !== null ? { max_num_results: count } : {}),
      ...(threshold !== null ? { ranking_options: { score_threshold: threshold } } : {}),
      ...(filters !== null ? { filters: filters as AssistantTool['filters'] } : {}),
    };
  });
  return {
    ok: true,
    fields: {
      name,
      // Left empty on a new assistant: the service derives it from the name (and makes it unique).
      ...(slug ? { slug } : {}),
      description: values.description,
      systemPrompt: values.system_prompt,
      model: values.model,
      // Checked by the service (an embedding model of the catalog): its refusal names embedding_model.
      embeddingModel: values.embedding_model === '' ? null : values.embedding_model,
      temperature,
      maxTokens,
      tools,
      maxToolIterations: iterations!,
      chunkMaxTokens: chunkMaxTokens ?? undefined,
      chunkOverlapTokens: chunkOverlapTokens ?? undefined,
    },
  };
}

/** '' is null; anything else must read as a number (NaN otherwise). */
function optionalNumber(text: string): number | null {
  const trimmed = text.trim();
  if (trimmed === '') return null;
  return /^-?\d+(\.\d+)?$/.test(trimmed) ? Number(trimmed) : NaN;
}

/** A model as the picker shows it: context length and prices per million tokens. */
export interface ModelChoice {
  id: string;
  label: string;
  contextLength: string;
  inputPrice: string;
  outputPrice: string;
  functionCalling: boolean;
}

export function modelChoices(models: readonly ModelDefinition[]): ModelChoice[] {
  return models.map((model) => {
    const contextLength = `${model.contextLength.toLocaleString('en-US')} tokens`;
    const inputPrice = formatMillicents(model.inputPrice);
    const outputPrice = formatMillicents(model.outputPrice);
    return {
      id: model.id,
      label: `${model.id} · ${shortTokens(model.contextLength)} context · ${inputPrice} / ${outputPrice}`,
      contextLength,
      inputPrice,
      outputPrice,
      functionCalling: model.functionCalling,
    };
  });
}

/** 128000 -> "128K", 1000000 -> "1M": context lengths in a picker's line. */
function shortTokens(tokens: number): string {
  if (tokens >= 1_000_000 && tokens % 100_000 === 0) return `${tokens / 1_000_000}M`;
  if (tokens >= 1000 && tokens % 100 === 0) return `${tokens / 1000}K`;
  return tokens.toLocaleString('en-US');
}

/** A row of the assistants' list. */
export interface AssistantRow {
  id: string;
  name: string;
  slug: string;
  model: string;
  tools: string;
  description: string;
}

export function assistantRow(assistant: Assistant): AssistantRow {
  return {
    id: assistant.id,
    name: assistant.name,
    slug: assistant.slug,
    model: assistant.model,
    tools: assistant.tools.map((tool) => tool.type).join(', ') || 'none',
    description: assistant.description,
  };
}

/** A document as its list shows it. */
export interface DocumentRow {
  id: string;
  name: string;
  size: string;
  chunks: number;
  /** The text search configuration it is indexed with. */
  language: string;
  /** "800 / 400" tokens it was split with ("400 / 60" before the setting existed). */
  chunking: string;
  status: Document['status'];
  failureReason: string | null;
  /** Its chunks wait for their embeddings (hybrid search). */
  embeddingsPending: boolean;
  uploaded: string;
}

export function documentRow(document: Document): DocumentRow {
  return {
    id: document.id,
    name: document.name,
    size: formatBytes(document.sizeBytes),
    chunks: document.chunkCount,
    language: document.language,
    chunking: `${document.chunkMaxTokens ?? DEFAULT_CHUNKING.maxTokens} / ${document.chunkOverlapTokens ?? DEFAULT_CHUNKING.overlapTokens}`,
    status: document.status,
    failureReason: document.failureReason,
    embeddingsPending: document.embeddingsDue,
    uploaded: formatDateTime(document.createdAt),
  };
}
