import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Chat widgets (issue 14): an assistant published on other websites. `public_id` is what the
 * embed tag carries (random, never the assistant's uuid); `allowed_origins` are exact
 * `scheme://host[:port]` origins, and a widget cannot be enabled without one.
 * `widget_conversations` keeps each anonymous visitor's conversation, so that the widget
 * finds it again after a reload; it goes with the conversation or the widget.
 */
export class Widgets1764001800000 implements MigrationInterface {
  name = 'Widgets1764001800000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE widgets (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        public_id text NOT NULL UNIQUE,
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        assistant_id uuid NOT NULL UNIQUE REFERENCES assistants(id) ON DELETE CASCADE,
        enabled boolean NOT NULL DEFAULT false,
        allowed_origins text[] NOT NULL DEFAULT '{}',
        title text NOT NULL,
        greeting text NOT NULL DEFAULT '',
        placeholder text NOT NULL,
        accent_color text NOT NULL CHECK (accent_color ~ '^#[0-9a-f]{6}$'),
        theme text NOT NULL DEFAULT 'light' CHECK (theme IN ('light', 'dark')),
        position text NOT NULL DEFAULT 'bottom-right' CHECK (position IN ('bottom-right', 'bottom-left')),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CHECK (NOT enabled OR cardinality(allowed_origins) > 0)
      )`);
    await queryRunner.query(`CREATE INDEX widgets_workspace_id_idx ON widgets (workspace_id)`);
    await queryRunner.query(`
      CREATE TABLE widget_conversations (
        widget_id uuid NOT NULL REFERENCES widgets(id) ON DELETE CASCADE,
        visitor_id text NOT NULL,
        conversation_id uuid NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (widget_id, visitor_id)
      )`);
    await queryRunner.query(`CREATE INDEX widget_conversations_conversation_id_idx ON widget_conversations (conversation_id)`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE widget_conversations`);
    await queryRunner.query(`DROP TABLE widgets`);
  }
}
