import { ApiError } from '../common/errors/api-error';
import type { ModelDto } from './dto/model.dto';

/** A model as Anthropic's Models API gives it (`client.models.list()` / `retrieve()` of `@anthropic-ai/sdk`). */
export interface AnthropicModel {
  type: 'model';
  id: string;
  display_name: string;
  /** RFC 3339. */
  created_at: string;
  max_input_tokens: number;
  max_tokens: number | null;
}

/** One page of Anthropic's model list, with its cursors. */
export interface AnthropicModelPage {
  data: AnthropicModel[];
  has_more: boolean;
  first_id: string | null;
  last_id: string | null;
}

/** Anthropic's paging: `limit` (1 to 1000, 20 by default), and `after_id` or `before_id`, the id of an entry of the list. */
export interface AnthropicPaging {
  limit?: string;
  after_id?: string;
  before_id?: string;
}

/**
 * An entry of the list in Anthropic's shape. An alias is named with the model that runs it
 * (`claude-sonnet-4-5 (gpt-4o)`), an assistant by its name; `maxTokens` is its model's output limit.
 */
export function anthropicModelOf(entry: ModelDto, maxTokens: number | undefined): AnthropicModel {
  return {
    type: 'model',
    id: entry.id,
    display_name: entry.assistant?.name ?? (entry.alias_of ? `${entry.id} (${entry.alias_of})` : entry.id),
    created_at: new Date(entry.created * 1000).toISOString().replace('.000Z', 'Z'),
    max_input_tokens: entry.context_length,
    max_tokens: maxTokens ?? null,
  };
}

/** The page `paging` asks for, in the list's order; a bad `limit` or an id not in the list is a 400 naming it. */
export function anthropicPage(models: AnthropicModel[], paging: AnthropicPaging): AnthropicModelPage {
  const limit = paging.limit === undefined ? 20 : Number(paging.limit);
  if (!/^\d+$/.test(paging.limit ?? '20') || limit < 1 || limit > 1000) {
    throw ApiError.badRequest('limit must be a whole number from 1 to 1000.', 'limit');
  }
  if (paging.after_id !== undefined && paging.before_id !== undefined) {
    throw ApiError.badRequest('Give after_id or before_id, not both.', 'before_id');
  }
  const indexOf = (param: 'after_id' | 'before_id'): number => {
    const at = models.findIndex((model) => model.id === paging[param]);
    if (at < 0) throw ApiError.badRequest(`${param}: "${String(paging[param]).slice(0, 200)}" is not in the list of models.`, param);
    return at;
  };
  let start = 0;
  let end = Math.min(limit, models.length);
  if (paging.after_id !== undefined) {
    start = indexOf('after_id') + 1;
    end = Math.min(start + limit, models.length);
  } else if (paging.before_id !== undefined) {
    end = indexOf('before_id');
    start = Math.max(0, end - limit);
  }
  const data = models.slice(start, end);
  // has_more looks the way the page was asked for: backwards for before_id, as the SDK pages.
  const hasMore = paging.before_id !== undefined ? start > 0 : end < models.length;
  return { data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
}
