import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Conversations and their messages, with full-text search kept by PostgreSQL itself:
 * generated `tsvector` columns (title weighted A, message text D) under GIN indexes.
 */
export class Conversations1764000700000 implements MigrationInterface {
  name = 'Conversations1764000700000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    // The searchable text of a message: the content itself, or for non-string content (stored
    // as JSON) only its text parts, so image data URLs are never indexed. Cut at 100000
    // characters so that a huge message can never exceed the tsvector size limit (1 MB) and
    // fail the chat settlement it is written in. Used by the generated column and ts_headline.
    await queryRunner.query(`
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
        $$`);
    await queryRunner.query(`
      CREATE TABLE conversations (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        assistant_id uuid REFERENCES assistants(id) ON DELETE SET NULL,
        title text CHECK (title IS NULL OR length(title) <= 512),
        source text NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'dashboard')),
        status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
        user_id text CHECK (user_id IS NULL OR length(user_id) <= 256),
        metadata jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
        message_count integer NOT NULL DEFAULT 0 CHECK (message_count >= 0),
        total_input_tokens bigint NOT NULL DEFAULT 0 CHECK (total_input_tokens >= 0),
        total_output_tokens bigint NOT NULL DEFAULT 0 CHECK (total_output_tokens >= 0),
        total_cost_millicents numeric(20, 6) NOT NULL DEFAULT 0 CHECK (total_cost_millicents >= 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        last_message_at timestamptz,
        -- The list order: newest activity first.
        last_activity_at timestamptz GENERATED ALWAYS AS (coalesce(last_message_at, created_at)) STORED,
        title_vector tsvector GENERATED ALWAYS AS (setweight(to_tsvector('english', coalesce(title, '')), 'A')) STORED,
        -- Target of the messages' (conversation_id, workspace_id) key: a message is always in its conversation's workspace.
        CONSTRAINT conversations_id_workspace_unique UNIQUE (id, workspace_id)
      )`);
    await queryRunner.query(
      `CREATE INDEX conversations_workspace_activity_idx ON conversations (workspace_id, last_activity_at DESC, id DESC)`,
    );
    await queryRunner.query(`CREATE INDEX conversations_workspace_created_idx ON conversations (workspace_id, created_at)`);
    await queryRunner.query(`CREATE INDEX conversations_assistant_idx ON conversations (assistant_id) WHERE assistant_id IS NOT NULL`);
    await queryRunner.query(`CREATE INDEX conversations_title_vector_idx ON conversations USING gin (title_vector)`);
    await queryRunner.query(`
      CREATE TABLE conversation_messages (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        conversation_id uuid NOT NULL,
        workspace_id uuid NOT NULL,
        -- 1, 2, 3, ... in the conversation: the order of the messages (a turn's share one created_at).
        position integer NOT NULL CHECK (position > 0),
        role text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        -- 'text': content is the message text; 'json': content is the JSON of non-string content (parts).
        content_type text NOT NULL DEFAULT 'text' CHECK (content_type IN ('text', 'json')),
        content text NOT NULL DEFAULT '',
        tool_calls jsonb CHECK (tool_calls IS NULL OR jsonb_typeof(tool_calls) = 'array'),
        tool_call_id text,
        tokens integer NOT NULL DEFAULT 0 CHECK (tokens >= 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        search_vector tsvector GENERATED ALWAYS AS
          (to_tsvector('english', conversation_message_search_text(content_type, content))) STORED,
        CONSTRAINT conversation_messages_conversation_fk FOREIGN KEY (conversation_id, workspace_id)
          REFERENCES conversations (id, workspace_id) ON DELETE CASCADE,
        CONSTRAINT conversation_messages_position_unique UNIQUE (conversation_id, position)
      )`);
    await queryRunner.query(
      `CREATE INDEX conversation_messages_workspace_created_idx ON conversation_messages (workspace_id, created_at)`,
    );
    await queryRunner.query(
      `CREATE INDEX conversation_messages_search_vector_idx ON conversation_messages USING gin (search_vector)`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE conversation_messages`);
    await queryRunner.query(`DROP TABLE conversations`);
    await queryRunner.query(`DROP FUNCTION conversation_message_search_text(text, text)`);
  }
}
