import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Stored responses of `POST /v1/responses` (`store: true`, OpenAI's default). The messages
 * themselves live in the conversation the response belongs to (its history feeds
 * `previous_response_id`); this row keeps what the Responses API returns and replays: the
 * response object and the input items as given. Deleting the conversation deletes its
 * responses. `output_item_ids` lets an `item_reference` input find a stored output item.
 */
export class Responses1764001900000 implements MigrationInterface {
  name = 'Responses1764001900000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE responses (
        id text PRIMARY KEY CHECK (id ~ '^resp_[A-Za-z0-9_-]{1,100}$'),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        conversation_id uuid NOT NULL,
        body jsonb NOT NULL CHECK (jsonb_typeof(body) = 'object'),
        input_items jsonb NOT NULL CHECK (jsonb_typeof(input_items) = 'array'),
        output_item_ids text[] NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now(),
        FOREIGN KEY (conversation_id, workspace_id) REFERENCES conversations (id, workspace_id) ON DELETE CASCADE
      )`);
    await queryRunner.query(`CREATE INDEX responses_conversation_idx ON responses (conversation_id, created_at DESC)`);
    await queryRunner.query(`CREATE INDEX responses_output_items_idx ON responses USING gin (output_item_ids)`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE responses`);
  }
}
