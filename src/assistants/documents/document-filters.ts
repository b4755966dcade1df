import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { ApiError } from '../../common/errors/api-error';
import type { SourceAttributes } from '../../tools/citations';
import type { AttributeFilter, ToolSettings } from '../../tools/server-tool';
import { Document } from './entities/document.entity';

/**
 * file_search's options as OpenAI has them (`max_num_results`, `ranking_options`,
 * `filters`), checked where they are given (an assistant's tool settings, a Responses
 * request's `file_search` tool), and the attribute filters resolved to the documents they
 * leave. A document's attributes: `filename`, `type` (its MIME type, or its extension) and
 * `uploaded_at` (unix seconds, as OpenAI's numeric attributes).
 */

export const MAX_NUM_RESULTS = 50;
/** A filter nests at most this deep (a comparison inside an `and` is depth 2)... */
export const MAX_FILTER_DEPTH = 4;
/** ...holds at most this many comparisons, and an `in` list at most this many values. */
export const MAX_FILTER_COMPARISONS = 32;
export const MAX_FILTER_VALUES = 100;
const MAX_VALUE_CHARS = 1_000;

/** The filterable keys, with the names they may be given under. */
const KEYS: Record<string, AttributeKey> = { filename: 'filename', name: 'filename', type: 'type', uploaded_at: 'uploaded_at', created_at: 'uploaded_at' };
type AttributeKey = 'filename' | 'type' | 'uploaded_at';
const COMPARISONS = ['eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'nin'] as const;
const ORDERINGS = new Set(['gt', 'gte', 'lt', 'lte']);

export type FileSearchSettings = Pick<ToolSettings, 'max_num_results' | 'ranking_options' | 'filters'>;

/**
 * The file_search options of `value` (an object of the caller's), checked and cut to what is
 * kept; `param` names where it came from (`tools.0`). Throws a 400 naming the field.
 */
export function parseFileSearchOptions(value: Record<string, unknown>, param: string): FileSearchSettings {
  const options: FileSearchSettings = {};
  const count = value.max_num_results;
  if (count !== undefined && count !== null) {
    if (typeof count !== 'number' || !Number.isInteger(count) || count < 1 || count > MAX_NUM_RESULTS) {
      throw ApiError.badRequest(`max_num_results must be an integer from 1 to ${MAX_NUM_RESULTS}.`, `${param}.max_num_results`);
    }
    options.max_num_results = count;
  }
  const ranking = value.ranking_options;
  if (ranking !== undefined && ranking !== null) {
    if (typeof ranking !== 'object' || Array.isArray(ranking)) throw ApiError.badRequest('ranking_options must be an object.', `${param}.ranking_options`);
    const threshold = (ranking as Record<string, unknown>).score_threshold;
    if (threshold !== undefined && threshold !== null) {
      if (typeof threshold !== 'number' || !Number.isFinite(threshold) || threshold < 0 || threshold > 1) {
        throw ApiError.badRequest('score_threshold must be a number from 0 to 1.', `${param}.ranking_options.score_threshold`);
      }
      options.ranking_options = { score_threshold: threshold };
    }
    // `ranker` and `hybrid_search` choose among OpenAI's rankers: there is one here, and they are ignored.
  }
  if (value.filters !== undefined && value.filters !== null) {
    const counter = { comparisons: 0 };
    options.filters = parseFilter(value.filters, `${param}.filters`, 1, counter);
  }
  return options;
}

function parseFilter(value: unknown, param: string, depth: number, counter: { comparisons: number }): AttributeFilter {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw ApiError.badRequest('A filter must be an object.', param);
  if (depth > MAX_FILTER_DEPTH) throw ApiError.badRequest(`Filters nest at most ${MAX_FILTER_DEPTH} deep.`, param);
  const { type, key, value: operand, filters } = value as Record<string, unknown>;
  if (type === 'and' || type === 'or') {
    if (!Array.isArray(filters) || filters.length === 0) throw ApiError.badRequest(`An ${type} filter needs a non-empty filters array.`, `${param}.filters`);
    return { type, filters: filters.map((filter, index) => parseFilter(filter, `${param}.filters.${index}`, depth + 1, counter)) };
  }
  if (!(COMPARISONS as readonly unknown[]).includes(type)) {
    throw ApiError.badRequest(`type must be one of ${[...COMPARISONS, 'and', 'or'].join(', ')}.`, `${param}.type`);
  }
  if (++counter.comparisons > MAX_FILTER_COMPARISONS) throw ApiError.badRequest(`A filter holds at most ${MAX_FILTER_COMPARISONS} comparisons.`, param);
  const attribute = typeof key === 'string' ? KEYS[key] : undefined;
  if (!attribute) throw ApiError.badRequest(`key must be one of ${Object.keys(KEYS).join(', ')}.`, `${param}.key`);
  const comparison = type as (typeof COMPARISONS)[number];
  const numeric = attribute === 'uploaded_at';
  const fits = (entry: unknown) =>
    numeric ? typeof entry === 'number' && Number.isFinite(entry) : typeof entry === 'string' && entry.length <= MAX_VALUE_CHARS;
  const expected = numeric ? 'a number (unix seconds)' : `a string of at most ${MAX_VALUE_CHARS} characters`;
  if (ORDERINGS.has(comparison) && !numeric) throw ApiError.badRequest(`${comparison} compares numbers: use it with uploaded_at.`, `${param}.type`);
  if (comparison === 'in' || comparison === 'nin') {
    if (!Array.isArray(operand) || operand.length === 0 || operand.length > MAX_FILTER_VALUES || !operand.every(fits)) {
      throw ApiError.badRequest(`value must be an array of 1 to ${MAX_FILTER_VALUES} values, each ${expected}.`, `${param}.value`);
    }
    return { type: comparison, key: key as string, value: operand as Array<string | number> };
  }
  if (!fits(operand)) throw ApiError.badRequest(`value must be ${expected}.`, `${param}.value`);
  return { type: comparison, key: key as string, value: operand as string | number };
}

/** A document's attributes, as filters see them and as file_search results carry them. */
export interface DocumentAttributes {
  filename: string;
  /** The MIME type. */
  type: string;
  /** Unix seconds. */
  uploaded_at: number;
}

/** Whether a document's attributes satisfy the (checked) filter. */
export function matchesFilter(filter: AttributeFilter, attributes: DocumentAttributes): boolean {
  if ('filters' in filter) {
    return filter.type === 'and' ? filter.filters.every((inner) => matchesFilter(inner, attributes)) : filter.filters.some((inner) => matchesFilter(inner, attributes));
  }
  const attribute = KEYS[filter.key];
  const equals = (operand: string | number | boolean) => equalsAttribute(attribute, attributes, operand);
  switch (filter.type) {
    case 'eq':
      return equals(filter.value as string | number);
    case 'ne':
      return !equals(filter.value as string | number);
    case 'in':
      return (filter.value as Array<string | number>).some(equals);
    case 'nin':
      return !(filter.value as Array<string | number>).some(equals);
    default: {
      const at = attributes.uploaded_at;
      const operand = filter.value as number;
      return filter.type === 'gt' ? at > operand : filter.type === 'gte' ? at >= operand : filter.type === 'lt' ? at < operand : at <= operand;
    }
  }
}

/** `type` matches the MIME type or the file's extension (`pdf`, `.pdf`, `application/pdf`), whatever the case. */
function equalsAttribute(attribute: AttributeKey, attributes: DocumentAttributes, operand: string | number | boolean): boolean {
  if (attribute === 'uploaded_at') return attributes.uploaded_at === operand;
  if (typeof operand !== 'string') return false;
  if (attribute === 'filename') return attributes.filename === operand;
  const wanted = operand.toLowerCase().replace(/^\./, '');
  const extension = /\.([^./]+)$/.exec(attributes.filename)?.[1]?.toLowerCase();
  return attributes.type.toLowerCase() === wanted || extension === wanted;
}

/** The attributes as a file_search result's `attributes`. */
export function sourceAttributes(attributes: DocumentAttributes): SourceAttributes {
  return { filename: attributes.filename, type: attributes.type, uploaded_at: attributes.uploaded_at };
}

/** The attributes of an assistant's documents, for file_search's filters and results. */
@Injectable()
export class DocumentFilters {
  constructor(@InjectRepository(Document) private readonly documents: Repository<Document>) {}

  /** Each of the assistant's documents' attributes, by document id. */
  async attributesOf(assistantId: string): Promise<Map<string, DocumentAttributes>> {
    const rows = await this.documents.find({ where: { assistantId }, select: { id: true, name: true, mimeType: true, createdAt: true } });
    return new Map(rows.map((row) => [row.id, { filename: row.name, type: row.mimeType, uploaded_at: Math.floor(row.createdAt.getTime() / 1000) }]));
  }
}

/** The ids of the documents whose attributes match the filter. */
export function documentsMatching(filter: AttributeFilter, documents: ReadonlyMap<string, DocumentAttributes>): string[] {
  return [...documents].filter(([, attributes]) => matchesFilter(filter, attributes)).map(([id]) => id);
}
