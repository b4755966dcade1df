import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Nerfing rules: a workspace's restriction rules for its end users (issue 14), applied in
 * `position` order to each chat request. One column per part of a rule, each checked here,
 * so that a rule the chat path reads is always whole: a scope (`all`, one `user`, or
 * `widget_visitors`), a calendar window, a threshold on one metric, and an action with its
 * one parameter.
 *
 * `usage_records.nerfing`: what rules did to the request (`[{rule_id, action, ...}]`), empty
 * for nearly every request. A constant default adds the column without rewriting the table.
 */
export class NerfingRules1764001700000 implements MigrationInterface {
  name = 'NerfingRules1764001700000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE nerfing_rules (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        position integer NOT NULL,
        scope_type text NOT NULL CHECK (scope_type IN ('all', 'user', 'widget_visitors')),
        scope_user_id text,
        "window" text NOT NULL CHECK ("window" IN ('minute', 'hour', 'day', 'month')),
        metric text NOT NULL CHECK (metric IN ('requests', 'tokens', 'cost_millicents')),
        threshold bigint NOT NULL CHECK (threshold > 0),
        action_type text NOT NULL CHECK (action_type IN ('block', 'cap_output', 'downgrade')),
        action_max_tokens integer CHECK (action_max_tokens > 0),
        action_model text,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT nerfing_rules_scope_user CHECK ((scope_type = 'user') = (scope_user_id IS NOT NULL)),
        CONSTRAINT nerfing_rules_cap CHECK ((action_type = 'cap_output') = (action_max_tokens IS NOT NULL)),
        CONSTRAINT nerfing_rules_downgrade CHECK ((action_type = 'downgrade') = (action_model IS NOT NULL))
      )`);
    await queryRunner.query(`CREATE INDEX nerfing_rules_workspace ON nerfing_rules (workspace_id, position)`);
    await queryRunner.query(`ALTER TABLE usage_records ADD COLUMN nerfing jsonb NOT NULL DEFAULT '[]'`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE usage_records DROP COLUMN nerfing`);
    await queryRunner.query(`DROP TABLE nerfing_rules`);
  }
}
