import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Each replica's view of its upstream deployments (state, last minute's traffic, median
 * latency), written every few seconds: the CLI is another process and cannot read a
 * server's memory, so `npm run cli -- deployments` reads these rows. A replica removes its
 * rows when it stops; rows of replicas that died are removed by the others' writes.
 */
export class DeploymentHealth1764003400000 implements MigrationInterface {
  name = 'DeploymentHealth1764003400000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE deployment_health (
        replica text NOT NULL,
        deployment text NOT NULL,
        model text NOT NULL,
        label text NOT NULL,
        provider text NOT NULL,
        state text NOT NULL,
        cooldown_until timestamptz NULL,
        in_flight int NOT NULL,
        requests int NOT NULL,
        errors int NOT NULL,
        p50_ms int NULL,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (replica, deployment)
      )`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE deployment_health`);
  }
}
