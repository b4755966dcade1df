import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * `widgets.show_sources`: whether the widget shows visitors the sources an answer cites
 * (page titles with their links, document names). Off unless its owner turns it on: a
 * document's name may say more than the workspace wants its visitors to read.
 */
export class WidgetShowSources1764004300001 implements MigrationInterface {
  name = 'WidgetShowSources1764004300001';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE widgets ADD COLUMN show_sources boolean NOT NULL DEFAULT false`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE widgets DROP COLUMN show_sources`);
  }
}
