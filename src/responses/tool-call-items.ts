import type { ToolCallReport } from '../chat/chat.service';
import type { SourceAttributes } from '../tools/citations';
import { newId } from './chat-translation';

/**
 * The server tools' calls as the Responses API's output items: `file_search_call` (its query,
 * and with `include: ["file_search_call.results"]` the passages found) and `web_search_call`
 * (its query, and with `include: ["web_search_call.action.sources"]` the pages found). Only
 * a call that could not run (bad arguments, the search failing) is an item with status `failed`.
 */

export interface FileSearchResultItem {
  file_id: string;
  filename: string;
  score: number;
  text: string;
  attributes: SourceAttributes;
}

export interface FileSearchCallItem {
  type: 'file_search_call';
  id: string;
  status: 'in_progress' | 'searching' | 'completed' | 'failed';
  queries: string[];
  results: FileSearchResultItem[] | null;
}

export interface WebSearchCallItem {
  type: 'web_search_call';
  id: string;
  status: 'in_progress' | 'searching' | 'completed' | 'failed';
  action: { type: 'search'; query: string; sources?: Array<{ type: 'url'; url: string }> };
}

export type ToolCallItem = FileSearchCallItem | WebSearchCallItem;

/** The output item of a server tool call, or null for a tool the Responses API has no item for. */
export function toolCallItem({ call, outcome }: ToolCallReport, include: ReadonlySet<string>): ToolCallItem | null {
  const query = queryOf(call.arguments);
  const status = outcome.ran ? 'completed' : 'failed';
  const results = outcome.results ?? [];
  if (call.name === 'file_search') {
    const wanted = include.has('file_search_call.results');
    return {
      type: 'file_search_call',
      id: newId('fs'),
      status,
      queries: query === undefined ? [] : [query],
      results: wanted
        ? results.flatMap(({ source }) =>
            source.type === 'file'
              ? [{ file_id: source.file_id, filename: source.filename, score: source.score, text: source.text, attributes: source.attributes }]
              : [],
          )
        : null,
    };
  }
  if (call.name === 'web_search') {
    const sources = include.has('web_search_call.action.sources')
      ? { sources: results.flatMap(({ source }) => (source.type === 'url' ? [{ type: 'url' as const, url: source.url }] : [])) }
      : {};
    return { type: 'web_search_call', id: newId('ws'), status, action: { type: 'search', query: query ?? '', ...sources } };
  }
  return null;
}

function queryOf(args: string): string | undefined {
  try {
    const query = (JSON.parse(args) as { query?: unknown } | null)?.query;
    return typeof query === 'string' ? query.trim() : undefined;
  } catch {
    return undefined;
  }
}
