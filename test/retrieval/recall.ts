import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { EntityManager } from 'typeorm';

/**
 * The retrieval set (test/retrieval): a corpus of documents written for it (corpus/) plus the
 * retrieval-quality corpus (test/fixtures/corpus), and questions.json, each question labelled
 * with the passage that answers it. Helpers to load it and to measure recall@k of a search,
 * shared by the recall suites of each retrieval leg.
 */

export type QuestionKind = 'keyword' | 'paraphrase' | 'typo' | 'identifier' | 'language';
export const QUESTION_KINDS: QuestionKind[] = ['keyword', 'paraphrase', 'typo', 'identifier', 'language'];

export interface RetrievalQuestion {
  id: string;
  question: string;
  kind: QuestionKind;
  /** File name of the document that answers it. */
  document: string;
  /** An exact substring of that document that answers it. */
  passage: string;
}

export interface CorpusFile {
  name: string;
  path: string;
}

/** What a search returns, as far as recall is concerned. */
export interface RetrievedPassage {
  document_name: string;
  content: string;
}

export const CORPUS_DIRECTORIES = [path.join(__dirname, 'corpus'), path.join(__dirname, '..', 'fixtures', 'corpus')];

export function loadCorpus(): CorpusFile[] {
  return CORPUS_DIRECTORIES.flatMap((directory) =>
    readdirSync(directory)
      .sort()
      .map((name) => ({ name, path: path.join(directory, name) })),
  );
}

export function loadQuestions(): RetrievalQuestion[] {
  return JSON.parse(readFileSync(path.join(__dirname, 'questions.json'), 'utf8')) as RetrievalQuestion[];
}

/** Chunks are normalised text (single spaces): so is a passage before it is looked for. */
function squeeze(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/**
 * A passage of the right document that contains the labelled passage, or overlaps it: at
 * least half of it, cut by a chunk boundary (the start of the passage ends the chunk, or its
 * end starts it).
 */
export function isHit(result: RetrievedPassage, question: RetrievalQuestion): boolean {
  if (result.document_name !== question.document) return false;
  const content = squeeze(result.content);
  const passage = squeeze(question.passage);
  if (content.includes(passage)) return true;
  for (let length = passage.length - 1; length >= Math.ceil(passage.length / 2); length--) {
    if (content.endsWith(passage.slice(0, length)) || content.startsWith(passage.slice(passage.length - length))) return true;
  }
  return false;
}

export interface KindRecall {
  hits: number;
  questions: number;
  recall: number;
}

export interface RecallReport {
  overall: KindRecall;
  byKind: Record<QuestionKind, KindRecall>;
  /** Ids of the questions with no hit in the first k results. */
  misses: string[];
}

/** Recall@k of `search` over the questions: the share with a hit among the first k results. */
export async function measureRecall(
  questions: RetrievalQuestion[],
  search: (question: string, k: number) => Promise<RetrievedPassage[]>,
  k = 5,
): Promise<RecallReport> {
  const tally = (hits: number, total: number): KindRecall => ({ hits, questions: total, recall: total ? hits / total : 0 });
  const hitsByKind = new Map<QuestionKind, number>();
  const misses: string[] = [];
  for (const question of questions) {
    const results = (await search(question.question, k)).slice(0, k);
    if (results.some((result) => isHit(result, question))) hitsByKind.set(question.kind, (hitsByKind.get(question.kind) ?? 0) + 1);
    else misses.push(question.id);
  }
  const byKind = Object.fromEntries(
    QUESTION_KINDS.map((kind) => [kind, tally(hitsByKind.get(kind) ?? 0, questions.filter((q) => q.kind === kind).length)]),
  ) as Record<QuestionKind, KindRecall>;
  return { overall: tally(questions.length - misses.length, questions.length), byKind, misses };
}

/** A table of recall@k by kind, one column per search. */
export function recallTable(reports: Record<string, RecallReport>, k = 5): string {
  const names = Object.keys(reports);
  const cell = (r: KindRecall) => `${(r.recall * 100).toFixed(1)}% (${r.hits}/${r.questions})`.padEnd(18);
  const lines = [`${`recall@${k}`.padEnd(12)}${names.map((n) => n.padEnd(18)).join('')}`];
  for (const kind of QUESTION_KINDS) lines.push(`${kind.padEnd(12)}${names.map((n) => cell(reports[n].byKind[kind])).join('')}`);
  lines.push(`${'overall'.padEnd(12)}${names.map((n) => cell(reports[n].overall)).join('')}`);
  return lines.join('\n');
}

/**
 * Today's search, as of commit 50bc306 (FILE_SEARCH_SQL then): English full text only, the
 * strict query first, then partial matches by their share of the terms. Kept here as the
 * baseline the new legs are measured against; it builds the English vector itself, so it
 * stays the same whatever the chunks' own vectors become.
 */
export const BASELINE_FILE_SEARCH_SQL = `
  WITH q AS (
    SELECT strict,
           CASE WHEN strict::text LIKE '%!%' THEN strict ELSE replace(strict::text, ' & ', ' | ')::tsquery END AS loose,
           ARRAY(SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', $2)) AS v) AS lexemes
    FROM websearch_to_tsquery('english', $2) AS strict
    WHERE numnode(strict) > 0
  ),
  chunks AS (
    SELECT c.document_id, c.position, c.content, to_tsvector('english', c.content) AS tsv
    FROM document_chunks c WHERE c.assistant_id = $1
  ),
  scored AS (
    SELECT c.document_id, c.position, c.content,
           CASE WHEN c.tsv @@ q.strict THEN 1 + ts_rank_cd(c.tsv, q.strict, 32)
                ELSE ts_rank(c.tsv, q.loose, 32)
                     * (length(c.tsv) - length(ts_delete(c.tsv, q.lexemes)))
                     / greatest(cardinality(q.lexemes), 1)
           END AS score
    FROM q JOIN chunks c ON c.tsv @@ q.loose
  )
  SELECT s.document_id, d.name AS document_name, s.position, s.content, s.score / 2 AS score
  FROM scored s JOIN documents d ON d.id = s.document_id
  ORDER BY s.score DESC, d.created_at, d.id, s.position
  LIMIT $3`;

export async function baselineSearch(manager: EntityManager, assistantId: string, query: string, limit: number): Promise<RetrievedPassage[]> {
  return manager.query<RetrievedPassage[]>(BASELINE_FILE_SEARCH_SQL, [assistantId, query, limit]);
}

/**
 * Content words of a text, as PostgreSQL's English configuration stems them (stop words
 * dropped): a paraphrased question must share none with its passage.
 */
export async function englishStems(manager: EntityManager, text: string): Promise<string[]> {
  const rows = await manager.query<Array<{ lexeme: string }>>(`SELECT lexeme FROM unnest(to_tsvector('english', $1))`, [text]);
  return rows.map((row) => row.lexeme);
}

/** Words of a text, lower-cased, without the commonest function words: a second, stricter check than stems. */
export function contentWords(text: string): string[] {
  return (text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []).filter((word) => word.length > 2 && !FUNCTION_WORDS.has(word));
}

/** Two words share a stem when one starts with the other's first five letters (or they are equal). */
export function shareStem(a: string, b: string): boolean {
  if (a === b) return true;
  const stem = (word: string) => word.slice(0, 5);
  return a.length >= 5 && b.length >= 5 && stem(a) === stem(b);
}

const FUNCTION_WORDS = new Set(
  (
    'the and for are but not you your yours all any can had her was one our out has him his how its may new now see two who did ' +
    'does doing get got when what where which while whom why with will would could should about above after again against ' +
    'before being below between both down during each few from further here into just more most much must nor off once only ' +
    'other over own same some such than that then there these they this those through too under until very were also'
  ).split(' '),
);
