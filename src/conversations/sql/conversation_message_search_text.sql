-- conversation_message_search_text(): The searchable text of a conversation message (the generated column and ts_headline).
-- As migrations/1764000700000-Conversations.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE FUNCTION conversation_message_search_text(content_type text, content text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT left(
      CASE WHEN content_type = 'json' THEN coalesce(
        (SELECT string_agg(part #>> '{}', ' ')
           FROM jsonb_array_elements(
             jsonb_path_query_array(content::jsonb, 'lax $[*] ? (@.type == "text").text')) AS part),
        '')
      ELSE content END,
      100000)
  $$;
