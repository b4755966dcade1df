import type { Type } from '@nestjs/common';
import type { AppConfig } from '../config/app-config';
import type { FunctionTool } from '../providers/provider-adapter';
import type { CitedSource, SourceList } from './citations';

/** A configured tool price (`toolPrices` of the configuration, e.g. WEB_SEARCH_PRICE_MILLICENTS). */
export type ToolPriceKey = keyof AppConfig['toolPrices'];

/**
 * What a tool says of itself, as the static `descriptor` of its class. Everything that lists
 * the tools reads it from the registered list (ToolsService): the assistants' validation,
 * the dashboard's switches, the price of a call and the Responses API's hosted tool types.
 * Built-in tools declare it `{...} as const satisfies ServerToolDescriptor`, so that their
 * names make the ServerToolName type.
 */
export interface ServerToolDescriptor {
  /** The function name the model calls, and the `type` of the tool in an assistant's settings. */
  readonly name: string;
  /** The dashboard's switch for the tool in the assistant editor, and the line under it. */
  readonly label: string;
  readonly help: string;
  /** Which configured price one call that ran costs the caller (the amount stays in the configuration). */
  readonly price: ToolPriceKey;
  /**
   * The Responses API's hosted tool types it serves besides its name (`web_search_preview`);
   * a request's `{"type": <name or alias>}` asks for it.
   */
  readonly responsesAliases?: readonly string[];
}

/**
 * A tool that runs on the server when the model calls it, inside the chat's tool loop.
 * Each tool is a class with a static `descriptor`; the classes are registered in one list
 * (`SERVER_TOOL_CLASSES`, in `assistants/server-tools.ts`), provided together under
 * `SERVER_TOOLS`, and run by `ToolsService`, which finds them by name.
 */
export interface ServerTool {
  /** How the model sees the tool: a function with a JSON schema for its arguments. */
  readonly definition: FunctionTool;
  /** Results a call returns when the assistant's settings do not say (`max_results`). */
  readonly defaultMaxResults: number;
  /**
   * Runs one call with the model's JSON arguments and returns the tool message for the
   * model, with the results it numbered in `context.sources` (what the answer may cite), if
   * any. A call that returns is charged the tool's price. Throw `ToolArgumentsError` when
   * the arguments do not fit, `ToolCallError` when the tool could not do its work: the model
   * is told why, and the call is free.
   */
  run(args: string, context: ToolContext): Promise<string | ToolRun>;
}

/** What a call returned: the tool message for the model and the results it cites by number. */
export interface ToolRun {
  content: string;
  results: CitedSource[];
}

/** A class implementing a server tool, with what it says of itself readable before any instance exists. */
export type ServerToolClass = Type<ServerTool> & { readonly descriptor: ServerToolDescriptor };

/** A tool as registered: its class's descriptor and its instance. */
export interface RegisteredTool {
  readonly descriptor: ServerToolDescriptor;
  readonly tool: ServerTool;
}

/** Injection token of every registered tool, as a `RegisteredTool` array (see `ToolsModule.register`). */
export const SERVER_TOOLS = Symbol('SERVER_TOOLS');

/** The registered list of `classes`, from their instances in the same order (a provider's factory). */
export function registeredTools(classes: readonly ServerToolClass[]): (...instances: ServerTool[]) => RegisteredTool[] {
  return (...instances) => classes.map((type, index) => ({ descriptor: type.descriptor, tool: instances[index] }));
}

/** An assistant's settings for one of its tools, as stored on the assistant. */
export interface ToolSettings {
  type: string;
  /** How many results (web pages, document passages) a call returns. */
  max_results?: number;
  /** file_search, in OpenAI's words: how many passages (1 to 50); replaces max_results. */
  max_num_results?: number;
  /** file_search: only passages scoring at least `score_threshold` (0 to 1). */
  ranking_options?: { score_threshold?: number };
  /** file_search: only the documents whose attributes match (OpenAI's comparison and compound filters). */
  filters?: AttributeFilter;
}

/** OpenAI's filters on file attributes (`ComparisonFilter`, `CompoundFilter`); checked by the documents' `parseFilter`. */
export type AttributeFilter =
  | { type: 'eq' | 'ne' | 'gt' | 'gte' | 'lt' | 'lte' | 'in' | 'nin'; key: string; value: string | number | boolean | Array<string | number> }
  | { type: 'and' | 'or'; filters: AttributeFilter[] };

/** What a tool may know of the assistant it runs for (the Assistant entity has this shape). */
export interface ToolHost {
  id: string;
  tools: readonly ToolSettings[];
}

export interface ToolContext {
  assistant: ToolHost;
  /** The assistant's `max_results` for this tool, else the tool's default. */
  maxResults: number;
  /** The assistant's settings of this tool (with a Responses request's own options applied). */
  settings: ToolSettings;
  /** The request's numbered sources: a tool adds its results, and renders each with its number. */
  sources: SourceList;
  /** Fires when the client left or the request was cancelled: stop, and let the error through. */
  signal: AbortSignal;
}

/** The tool could not do its work; the message, written for the model, says why (`web search failed: timeout`). */
export class ToolCallError extends Error {
  override readonly name = 'ToolCallError';
}

/** The model's arguments do not fit the tool; the message tells the model what they should be. */
export class ToolArgumentsError extends Error {
  override readonly name = 'ToolArgumentsError';
}

/** The `query` of a search tool's arguments (`{"query": "..."}`), trimmed; throws ToolArgumentsError without one. */
export function queryArgument(args: string, toolName: string): string {
  let parsed: { query?: unknown } | undefined;
  try {
    parsed = JSON.parse(args || '{}') as { query?: unknown };
  } catch {
    parsed = undefined;
  }
  const query = typeof parsed?.query === 'string' ? parsed.query.trim() : '';
  if (!query) throw new ToolArgumentsError(`${toolName} needs arguments of the form {"query": "..."}.`);
  return query;
}
