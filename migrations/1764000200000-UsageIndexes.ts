import { MigrationInterface, QueryRunner } from 'typeorm';

/** The UTC day of a usage record: the statistics' unit of time. */
const DAY_OF = `(created_at AT TIME ZONE 'UTC')::date`;

/**
 * What the usage statistics and the retention job read, so that they stay fast when a
 * workspace has millions of records.
 *
 * usage_daily_totals: per workspace, UTC day and model, the number of requests and the sums
 * of tokens, cost and latency. GET /v1/usage and /v1/usage/daily add up at most
 * (days x models) of these rows instead of every record: a few hundred rows for 90 days,
 * however many requests were made (bench/usage-summary.ts: under 1 ms for a workspace with
 * 1,000,000 records, against 0.3 to 0.7 s to aggregate the records themselves, with or without
 * a covering index). Statement-level triggers on usage_records
 * keep it equal to the aggregate of the records at all times, in the same transaction as
 * the change (inserts by the chat service, deletes by the retention job, a workspace's
 * cascade, any manual fix), so the totals are exact numerics and never lag.
 * The settlement that inserts a record already holds its wallet row lock, so the per-row
 * lock of the upsert adds no contention between the requests of a workspace.
 *
 * Indexes on usage_records, each the key of one query:
 * - created_at: the retention job finds the oldest records of all workspaces;
 * - (workspace_id, user_id | assistant_id | model, created_at DESC, id DESC): the filters of
 *   /v1/usage/recent, in page order, so that a filter on a value with few (or no) records
 *   does not walk through the whole workspace;
 * - (workspace_id, created_at DESC, id DESC) WHERE status = 'error': failures are few, so
 *   status=error needs its own (small) index; status=success uses the existing one.
 *
 * Plain CREATE INDEX inside the migration's transaction, not CONCURRENTLY: replicas waiting
 * on the migration lock hold snapshots that CONCURRENTLY would wait for, forever. Inserts
 * into usage_records wait while this migration runs (seconds per few million records).
 */
export class UsageIndexes1764000200000 implements MigrationInterface {
  name = 'UsageIndexes1764000200000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE usage_daily_totals (
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        day date NOT NULL,
        model text NOT NULL,
        requests bigint NOT NULL,
        tokens bigint NOT NULL,
        -- Unconstrained numeric: the exact sum of numeric(20, 6) costs.
        cost_millicents numeric NOT NULL,
        latency_ms bigint NOT NULL,
        PRIMARY KEY (workspace_id, day, model)
      )`);

    // Upserts in key order, so concurrent statements lock the rows they share in the same order.
    await queryRunner.query(`
      CREATE FUNCTION usage_daily_totals_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO usage_daily_totals AS t (workspace_id, day, model, requests, tokens, cost_millicents, latency_ms)
        SELECT workspace_id, ${DAY_OF}, model, count(*), sum(total_tokens), sum(total_cost_millicents), sum(latency_ms)
          FROM new_rows
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3
        ON CONFLICT (workspace_id, day, model) DO UPDATE SET
          requests = t.requests + excluded.requests,
          tokens = t.tokens + excluded.tokens,
          cost_millicents = t.cost_millicents + excluded.cost_millicents,
          latency_ms = t.latency_ms + excluded.latency_ms;
        RETURN NULL;
      END $$`);
    // Subtracts, and drops the rows that reach zero requests. Never inserts: in a workspace's
    // cascade delete its totals may already be gone, and an insert would violate the foreign key.
    await queryRunner.query(`
      CREATE FUNCTION usage_daily_totals_subtract() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE usage_daily_totals AS t SET
          requests = t.requests - o.requests,
          tokens = t.tokens - o.tokens,
          cost_millicents = t.cost_millicents - o.cost_millicents,
          latency_ms = t.latency_ms - o.latency_ms
          FROM (
            SELECT workspace_id, ${DAY_OF} AS day, model, count(*) AS requests, sum(total_tokens) AS tokens,
                   sum(total_cost_millicents) AS cost_millicents, sum(latency_ms) AS latency_ms
              FROM old_rows
             GROUP BY 1, 2, 3
          ) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model;
        DELETE FROM usage_daily_totals AS t
         USING (SELECT DISTINCT workspace_id, ${DAY_OF} AS day, model FROM old_rows) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model AND t.requests = 0;
        RETURN NULL;
      END $$`);
    await queryRunner.query(`
      CREATE FUNCTION usage_daily_totals_clear() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        TRUNCATE usage_daily_totals;
        RETURN NULL;
      END $$`);

    // An UPDATE of a record subtracts its old version and adds the new one.
    await queryRunner.query(`
      CREATE TRIGGER usage_daily_totals_on_insert AFTER INSERT ON usage_records
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_add()`);
    await queryRunner.query(`
      CREATE TRIGGER usage_daily_totals_on_update_old AFTER UPDATE ON usage_records
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_subtract()`);
    await queryRunner.query(`
      CREATE TRIGGER usage_daily_totals_on_update_new AFTER UPDATE ON usage_records
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_add()`);
    await queryRunner.query(`
      CREATE TRIGGER usage_daily_totals_on_delete AFTER DELETE ON usage_records
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_subtract()`);
    await queryRunner.query(`
      CREATE TRIGGER usage_daily_totals_on_truncate AFTER TRUNCATE ON usage_records
        FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_clear()`);

    // The records written before this migration. The triggers exist already and hold a lock
    // that keeps new inserts out until this transaction commits, so none is counted twice or missed.
    await queryRunner.query(`
      INSERT INTO usage_daily_totals (workspace_id, day, model, requests, tokens, cost_millicents, latency_ms)
      SELECT workspace_id, ${DAY_OF}, model, count(*), sum(total_tokens), sum(total_cost_millicents), sum(latency_ms)
        FROM usage_records
       GROUP BY 1, 2, 3`);

    await queryRunner.query(`CREATE INDEX usage_records_created_idx ON usage_records (created_at)`);
    await queryRunner.query(`
      CREATE INDEX usage_records_workspace_user_idx ON usage_records (workspace_id, user_id, created_at DESC, id DESC)
        WHERE user_id IS NOT NULL`);
    await queryRunner.query(`
      CREATE INDEX usage_records_workspace_assistant_idx ON usage_records (workspace_id, assistant_id, created_at DESC, id DESC)
        WHERE assistant_id IS NOT NULL`);
    await queryRunner.query(
      `CREATE INDEX usage_records_workspace_model_idx ON usage_records (workspace_id, model, created_at DESC, id DESC)`,
    );
    await queryRunner.query(`
      CREATE INDEX usage_records_workspace_errors_idx ON usage_records (workspace_id, created_at DESC, id DESC)
        WHERE status = 'error'`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX usage_records_workspace_errors_idx`);
    await queryRunner.query(`DROP INDEX usage_records_workspace_model_idx`);
    await queryRunner.query(`DROP INDEX usage_records_workspace_assistant_idx`);
    await queryRunner.query(`DROP INDEX usage_records_workspace_user_idx`);
    await queryRunner.query(`DROP INDEX usage_records_created_idx`);
    for (const trigger of ['on_insert', 'on_update_old', 'on_update_new', 'on_delete', 'on_truncate']) {
      await queryRunner.query(`DROP TRIGGER usage_daily_totals_${trigger} ON usage_records`);
    }
    await queryRunner.query(`DROP FUNCTION usage_daily_totals_add()`);
    await queryRunner.query(`DROP FUNCTION usage_daily_totals_subtract()`);
    await queryRunner.query(`DROP FUNCTION usage_daily_totals_clear()`);
    await queryRunner.query(`DROP TABLE usage_daily_totals`);
  }
}
