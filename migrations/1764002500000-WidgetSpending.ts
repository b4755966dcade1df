import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Widget spending bounded (issue 29): each widget has a daily spending cap, a bound on the
 * stored history each message replays, and a cap on each answer, set by its owner.
 * `widget_spending` counts, per widget and UTC day, what its messages were charged and what
 * messages in flight may still cost (reserved when admitted, settled with the exact cost),
 * so that admission is one conditional UPDATE; `alerted_at` makes the owner's alert at most
 * once per widget and day.
 */
export class WidgetSpending1764002500000 implements MigrationInterface {
  name = 'WidgetSpending1764002500000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      ALTER TABLE widgets
        ADD COLUMN daily_cap_millicents bigint NOT NULL DEFAULT 500000 CHECK (daily_cap_millicents BETWEEN 1 AND 100000000),
        ADD COLUMN history_messages integer NOT NULL DEFAULT 6 CHECK (history_messages BETWEEN 0 AND 20),
        ADD COLUMN max_answer_tokens integer NOT NULL DEFAULT 512 CHECK (max_answer_tokens BETWEEN 16 AND 4096)`);
    await queryRunner.query(`
      CREATE TABLE widget_spending (
        widget_id uuid NOT NULL REFERENCES widgets(id) ON DELETE CASCADE,
        day date NOT NULL,
        spent_millicents bigint NOT NULL DEFAULT 0 CHECK (spent_millicents >= 0),
        reserved_millicents bigint NOT NULL DEFAULT 0 CHECK (reserved_millicents >= 0),
        messages integer NOT NULL DEFAULT 0,
        refused integer NOT NULL DEFAULT 0,
        alerted_at timestamptz,
        PRIMARY KEY (widget_id, day)
      )`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE widget_spending`);
    await queryRunner.query(`ALTER TABLE widgets DROP COLUMN daily_cap_millicents, DROP COLUMN history_messages, DROP COLUMN max_answer_tokens`);
  }
}
