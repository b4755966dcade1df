/**
 * Token counts of usage records are `bigint` columns, which `pg` returns as strings: in a
 * `SELECT *, ${TOKENS_AS_INT}` the later columns of the same names win, as plain numbers.
 */
export const TOKENS_AS_INT =
  'input_tokens::int AS input_tokens, output_tokens::int AS output_tokens, total_tokens::int AS total_tokens, cached_tokens::int AS cached_tokens';
