import { MigrationInterface, QueryRunner } from 'typeorm';

export class Assistants1764000500000 implements MigrationInterface {
  name = 'Assistants1764000500000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE assistants (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        name text NOT NULL,
        slug text NOT NULL CHECK (slug ~ '^[a-z0-9]+(-[a-z0-9]+)*$' AND length(slug) <= 64),
        description text NOT NULL DEFAULT '',
        system_prompt text NOT NULL DEFAULT '',
        model text NOT NULL,
        temperature real CHECK (temperature IS NULL OR (temperature >= 0 AND temperature <= 2)),
        max_tokens integer CHECK (max_tokens IS NULL OR max_tokens > 0),
        tools jsonb NOT NULL DEFAULT '[]',
        max_tool_iterations integer NOT NULL DEFAULT 5 CHECK (max_tool_iterations BETWEEN 1 AND 20),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT assistants_workspace_slug_unique UNIQUE (workspace_id, slug)
      )`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE assistants`);
  }
}
