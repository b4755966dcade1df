-- lexical_form(): a chunk's text as the trigram leg of file_search compares it: identifiers joined
-- whatever separates a letter or digit from a digit (ERR-4012, E_317, v2/export), lower-cased.
-- As migrations/1764004200000-LexicalSearch.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE OR REPLACE FUNCTION lexical_form(content text) RETURNS text
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT lower(regexp_replace(content, '(?<=[[:alnum:]])[-_/](?=[[:digit:]])|(?<=[[:digit:]])[-_/](?=[[:alpha:]])', '', 'g'))
  $$;
