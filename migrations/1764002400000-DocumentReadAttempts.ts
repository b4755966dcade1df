import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * How many times a reader has taken up a `processing` document: counted when the reader
 * claims it, before reading, so a file whose reading kills its process (a crash, an OOM, a
 * SIGKILL) is still counted. The sweeper takes up a document at most a fixed number of times
 * in all, across restarts, and then marks it `failed`: a poison document cannot crash-loop a
 * replica. Documents already stored count as read once.
 */
export class DocumentReadAttempts1764002400000 implements MigrationInterface {
  name = 'DocumentReadAttempts1764002400000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE documents ADD COLUMN read_attempts integer NOT NULL DEFAULT 0 CHECK (read_attempts >= 0)`);
    await queryRunner.query(`UPDATE documents SET read_attempts = 1`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE documents DROP COLUMN read_attempts`);
  }
}
