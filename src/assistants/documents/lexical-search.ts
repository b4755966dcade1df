import type { EntityManager } from 'typeorm';

/** A chunk found by the lexical leg, best first. */
export interface LexicalMatch {
  document_id: string;
  document_name: string;
  /** The chunk's order in its document, from 0. */
  position: number;
  content: string;
  /** From 0 to 1: see LEXICAL_SEARCH_SQL. */
  score: number;
}

export interface LexicalSearchOptions {
  /** How many chunks at most. */
  limit: number;
  /** Only chunks of these documents; all of the assistant's when absent. */
  documentIds?: string[];
}

/**
 * Bounds of the trigram part, whose cost is set by how many chunks share trigrams with a
 * word: over 50,000 chunks of a small made-up vocabulary, one word had 32,000 candidates and
 * took 2.3 s to check. A query looks for at most this many words by trigrams (the longest),
 * each of which adds at most this many chunks (the first the index yields, not the most
 * similar: a GIN index does not order), so the leg's time is bounded by the query, not the corpus.
 */
const FUZZY_WORDS = 3;
const FUZZY_MATCHES_PER_WORD = 50;

/**
 * The lexical leg of `file_search`: full text in each document's own language, plus trigram
 * similarity for the words full text cannot match (typos, identifiers written otherwise).
 *
 * Full text (`fulltext`): the query is parsed once per language of the assistant's documents
 * (`websearch_to_tsquery`: words, "phrases", `or`, `-excluded`) and matched against the
 * chunks indexed in that language. Chunks with every term score from 0.5 to 1 by cover
 * density (`ts_rank_cd`); chunks with some of them below 0.5, by `ts_rank` times their share
 * of the terms (`ts_delete` removes the query's lexemes from the chunk's vector: the
 * difference in length is how many it has). Candidates come from the GIN index on `content_tsv`.
 *
 * Trigrams (`fuzzy`): the query's words in `lexical_form` (identifiers joined, lower case),
 * stop words of the documents' languages dropped (`words`). A word that some chunk has
 * exactly needs no trigram (full text finds it, and common words would drag in most chunks),
 * nor one of under 5 letters (too few trigrams: `told` would match `tool`); the others, and
 * every word mixing letters and digits, are looked for with `<%` (word
 * similarity to some extent of the chunk at least pg_trgm.word_similarity_threshold, 0.6 by
 * default) on the GIN trigram index of `lexical_form(content)`. Each adds its similarity,
 * times 0.5 over the number of words, to the chunk's score: a word found only this way
 * counts at most as much as a term full text found, in its share of the query.
 *
 * $1 assistant, $2 query, $3 limit, $4 document ids or null.
 */
export const LEXICAL_SEARCH_SQL = `
  WITH languages AS (
    SELECT DISTINCT language FROM documents
    WHERE assistant_id = $1 AND ($4::uuid[] IS NULL OR id = ANY($4::uuid[]))
  ),
  q AS (
    SELECT l.language, strict,
           CASE WHEN strict::text LIKE '%!%' THEN strict ELSE replace(strict::text, ' & ', ' | ')::tsquery END AS loose,
           ARRAY(SELECT DISTINCT lexeme FROM unnest(to_tsvector(l.language::regconfig, $2))) AS lexemes
    FROM languages l, websearch_to_tsquery(l.language::regconfig, $2) AS strict
    WHERE numnode(strict) > 0
  ),
  fulltext AS (
    SELECT c.id, c.document_id, c.position,
           CASE WHEN c.content_tsv @@ q.strict THEN 1 + ts_rank_cd(c.content_tsv, q.strict, 32)
                ELSE ts_rank(c.content_tsv, q.loose, 32)
                     * (length(c.content_tsv) - length(ts_delete(c.content_tsv, q.lexemes)))
                     / greatest(cardinality(q.lexemes), 1)
           END / 2 AS score
    FROM q JOIN document_chunks c ON c.assistant_id = $1 AND c.language = q.language AND c.content_tsv @@ q.loose
    WHERE $4::uuid[] IS NULL OR c.document_id = ANY($4::uuid[])
  ),
  words AS (
    SELECT DISTINCT w AS word
    FROM regexp_split_to_table(lexical_form($2), '[[:space:]!-/:-@[-\`{-~¡¿«»“”‘’]+') AS w
    WHERE length(w) >= 3 AND w !~ '^[0-9]+$'
      AND NOT EXISTS (SELECT 1 FROM languages l WHERE to_tsvector(l.language::regconfig, w) = ''::tsvector)
  ),
  fuzzy_words AS (
    SELECT word FROM words
    WHERE word ~ '[0-9]'
       OR length(word) >= 5 AND NOT EXISTS (
         SELECT 1 FROM q JOIN document_chunks c
           ON c.assistant_id = $1 AND c.language = q.language AND c.content_tsv @@ plainto_tsquery(q.language::regconfig, word))
    ORDER BY length(word) DESC, word
    LIMIT ${FUZZY_WORDS}
  ),
  fuzzy AS (
    SELECT m.id, m.document_id, m.position, sum(m.similarity) AS similarity
    FROM fuzzy_words f CROSS JOIN LATERAL (
      SELECT c.id, c.document_id, c.position, word_similarity(f.word, lexical_form(c.content)) AS similarity
      FROM document_chunks c
      WHERE c.assistant_id = $1 AND f.word <% lexical_form(c.content)
        AND ($4::uuid[] IS NULL OR c.document_id = ANY($4::uuid[]))
      LIMIT ${FUZZY_MATCHES_PER_WORD}
    ) m
    GROUP BY m.id, m.document_id, m.position
  ),
  scored AS (
    SELECT coalesce(t.id, z.id) AS id, coalesce(t.document_id, z.document_id) AS document_id,
           coalesce(t.position, z.position) AS position,
           least(1, coalesce(t.score, 0) + 0.5 * coalesce(z.similarity, 0) / greatest((SELECT count(*) FROM words), 1)) AS score
    FROM fulltext t FULL JOIN fuzzy z ON z.id = t.id
  ),
  -- The best first, before any chunk's text is read again: only these are fetched by id.
  top AS MATERIALIZED (
    SELECT s.id, s.document_id, s.position, s.score, d.name, d.created_at
    FROM scored s JOIN documents d ON d.id = s.document_id
    ORDER BY s.score DESC, d.created_at, d.id, s.position
    LIMIT $3
  )
  SELECT t.document_id, t.name AS document_name, t.position, c.content, t.score
  FROM top t JOIN document_chunks c ON c.id = t.id
  ORDER BY t.score DESC, t.created_at, t.document_id, t.position`;

/**
 * The assistant's chunks that best match `query` lexically, best first, with scores from 0
 * to 1 (rounded to 4 decimals). An empty query, or one of stop words only, finds nothing.
 */
export async function lexicalSearch(
  manager: EntityManager,
  assistantId: string,
  query: string,
  options: LexicalSearchOptions,
): Promise<LexicalMatch[]> {
  const text = query.trim();
  if (!text || options.documentIds?.length === 0) return [];
  const rows = await manager.query<Array<LexicalMatch & { score: number | string }>>(LEXICAL_SEARCH_SQL, [
    assistantId,
    text,
    options.limit,
    options.documentIds ?? null,
  ]);
  return rows.map((row) => ({ ...row, score: Math.round(Number(row.score) * 10_000) / 10_000 }));
}
