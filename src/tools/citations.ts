/**
 * The sources server tools hand the model, and the citations of them in its answer. Every
 * result a request's tools return gets a number, unique across the request's tool calls
 * (`[1]`, `[2]`, ...); the model is asked to cite with it, and the answer's markers are
 * mapped back to the results: an annotation never points at anything but a result of that
 * request, and always at a position inside the text.
 */

/** What file attributes a result carries (OpenAI's `attributes`: strings, numbers, booleans). */
export type SourceAttributes = Record<string, string | number | boolean>;

/** A passage of one of the assistant's documents (file_search). */
export interface FileSource {
  type: 'file';
  /** The document's id. */
  file_id: string;
  filename: string;
  /** From 0 to 1. */
  score: number;
  text: string;
  attributes: SourceAttributes;
}

/** A web page (web_search). */
export interface UrlSource {
  type: 'url';
  url: string;
  title: string;
}

export type ToolSource = FileSource | UrlSource;

/** A source with the number the model cites it by. */
export interface CitedSource {
  number: number;
  source: ToolSource;
}

/** One annotation of a chat completion's message, in OpenAI's shape (`url_citation`), or ours for files. */
export type ChatAnnotation =
  | { type: 'url_citation'; url_citation: { start_index: number; end_index: number; url: string; title: string } }
  | { type: 'file_citation'; file_citation: { file_id: string; filename: string; index: number; start_index: number; end_index: number } };

/** The Responses API's annotations of an `output_text`. */
export type ResponseAnnotation =
  | { type: 'url_citation'; url: string; title: string; start_index: number; end_index: number }
  | { type: 'file_citation'; file_id: string; filename: string; index: number };

/** A request's sources stop being numbered past this (a long tool loop); the rest are shown to the model unnumbered. */
export const MAX_SOURCES = 500;
/** An answer carries at most this many annotations. */
export const MAX_ANNOTATIONS = 200;

/**
 * The numbered sources of one request. The same web page or passage found twice keeps its
 * first number, so a citation means one thing across the tool loop's iterations.
 */
export class SourceList {
  private readonly list: CitedSource[] = [];
  private readonly byKey = new Map<string, CitedSource>();

  /** The source's number, new or the one it already has; undefined past MAX_SOURCES. */
  add(source: ToolSource): CitedSource | undefined {
    const key = source.type === 'url' ? `url:${source.url}` : `file:${source.file_id}:${source.text}`;
    const known = this.byKey.get(key);
    if (known) return known;
    if (this.list.length >= MAX_SOURCES) return undefined;
    const cited = { number: this.list.length + 1, source };
    this.list.push(cited);
    this.byKey.set(key, cited);
    return cited;
  }

  get(number: number): CitedSource | undefined {
    return this.list[number - 1];
  }

  get size(): number {
    return this.list.length;
  }
}

/** What a tool's results end with: how the model is to cite them. */
export const CITE_INSTRUCTION = 'Cite the sources you use with their number in square brackets, as in [1] or [2][3].';

/**
 * Markers models write: `[1]`, `[1, 2]`, `[^1]` (footnotes), and OpenAI's `【1†source】` /
 * `【4:0†source】`. Numbers of up to three digits, so that `[2024]` is not a citation.
 */
const MARKER = /\[\^?(\d{1,3}(?:\s*,\s*\d{1,3})*)\]|【(\d{1,3})(?::\d+)?†[^】\n]{0,40}】/g;

/** The citations of `sources` in `text`: one per cited number of each marker, at the marker's span. */
export function citationsIn(text: string, sources: SourceList): ChatAnnotation[] {
  if (sources.size === 0 || !text) return [];
  const annotations: ChatAnnotation[] = [];
  for (const match of text.matchAll(MARKER)) {
    const start = match.index;
    const end = start + match[0].length;
    const numbers = (match[1] ?? match[2]).split(',').map((part) => Number(part.trim()));
    for (const number of numbers) {
      const cited = sources.get(number);
      if (!cited) continue;
      annotations.push(annotationOf(cited.source, start, end));
      if (annotations.length >= MAX_ANNOTATIONS) return annotations;
    }
  }
  return annotations;
}

function annotationOf(source: ToolSource, start: number, end: number): ChatAnnotation {
  return source.type === 'url'
    ? { type: 'url_citation', url_citation: { start_index: start, end_index: end, url: source.url, title: source.title } }
    : { type: 'file_citation', file_citation: { file_id: source.file_id, filename: source.filename, index: start, start_index: start, end_index: end } };
}

/** A chat annotation in the Responses API's shape (a file citation sits at `index`, where its marker starts). */
export function responseAnnotationOf(annotation: ChatAnnotation): ResponseAnnotation {
  if (annotation.type === 'url_citation') return { type: 'url_citation', ...annotation.url_citation };
  const { file_id, filename, index } = annotation.file_citation;
  return { type: 'file_citation', file_id, filename, index };
}

/** The annotations of a message as stored or received, kept only when they have a known shape (a stored row is trusted no further). */
export function chatAnnotationsOf(value: unknown): ChatAnnotation[] {
  if (!Array.isArray(value)) return [];
  return value.filter(
    (entry): entry is ChatAnnotation =>
      (entry?.type === 'url_citation' && typeof entry.url_citation?.url === 'string') ||
      (entry?.type === 'file_citation' && typeof entry.file_citation?.file_id === 'string'),
  );
}

/** A cited source as a person reads it under an answer: a linked page title or a file name. */
export interface SourceLine {
  label: string;
  /** An http(s) URL to link, for a web page; null for a document. */
  url: string | null;
}

/** The distinct sources an answer's annotations cite, in the order first cited. */
export function sourceLines(annotations: readonly ChatAnnotation[]): SourceLine[] {
  const lines = new Map<string, SourceLine>();
  for (const annotation of annotations) {
    if (annotation.type === 'url_citation') {
      const { url, title } = annotation.url_citation;
      const linkable = /^https?:\/\//i.test(url);
      if (!lines.has(`url:${url}`)) lines.set(`url:${url}`, { label: title || url, url: linkable ? url : null });
    } else {
      const { file_id: id, filename } = annotation.file_citation;
      if (!lines.has(`file:${id}`)) lines.set(`file:${id}`, { label: filename, url: null });
    }
  }
  return [...lines.values()];
}
