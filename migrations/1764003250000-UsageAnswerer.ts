import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Who answered a request (issue 32, upstream routing): each usage record keeps the provider
 * and the deployment (the catalog's label) that answered, null when none did, and the number
 * of upstream attempts, failed ones included. All three are metadata-only changes (a nullable
 * column, a constant default): no rewrite of usage_records, however large.
 *
 * usage_daily_totals gains the provider in its key, so that GET /v1/usage can answer per
 * provider from the totals as it does per model. A primary key cannot hold a null: "no
 * provider" is '' there (the API answers null), which also works before PostgreSQL 15's
 * NULLS NOT DISTINCT. The records written before this migration have no provider, and their
 * totals keep ''. The table has one row per workspace, day and model: rebuilding its key is cheap.
 *
 * insert_usage_records() merges its rows over {"attempts": 0}: a row that names no attempts
 * (written by a replica of the previous version during a rolling update, or a journal entry
 * kept before the update) is inserted with 0, where the column's default cannot apply (a
 * populated record carries an explicit null).
 */
export class UsageAnswerer1764003250000 implements MigrationInterface {
  name = 'UsageAnswerer1764003250000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE usage_records ADD COLUMN provider text, ADD COLUMN deployment text, ADD COLUMN attempts integer NOT NULL DEFAULT 0`,
    );
    await queryRunner.query(`ALTER TABLE usage_daily_totals ADD COLUMN provider text NOT NULL DEFAULT ''`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals DROP CONSTRAINT usage_daily_totals_pkey`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals ADD PRIMARY KEY (workspace_id, day, model, provider)`);

    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION usage_daily_totals_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO usage_daily_totals AS t (workspace_id, day, model, provider, requests, tokens, cost_millicents, latency_ms)
        SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date, model, coalesce(provider, ''), count(*), sum(total_tokens),
               sum(total_cost_millicents), sum(latency_ms)
          FROM new_rows
         GROUP BY 1, 2, 3, 4
         ORDER BY 1, 2, 3, 4
        ON CONFLICT (workspace_id, day, model, provider) DO UPDATE SET
          requests = t.requests + excluded.requests,
          tokens = t.tokens + excluded.tokens,
          cost_millicents = t.cost_millicents + excluded.cost_millicents,
          latency_ms = t.latency_ms + excluded.latency_ms;
        RETURN NULL;
      END $$`);
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION usage_daily_totals_subtract() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE usage_daily_totals AS t SET
          requests = t.requests - o.requests,
          tokens = t.tokens - o.tokens,
          cost_millicents = t.cost_millicents - o.cost_millicents,
          latency_ms = t.latency_ms - o.latency_ms
          FROM (
            SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model, coalesce(provider, '') AS provider, count(*) AS requests,
                   sum(total_tokens) AS tokens, sum(total_cost_millicents) AS cost_millicents, sum(latency_ms) AS latency_ms
              FROM old_rows
             GROUP BY 1, 2, 3, 4
          ) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model AND t.provider = o.provider;
        DELETE FROM usage_daily_totals AS t
         USING (SELECT DISTINCT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model, coalesce(provider, '') AS provider FROM old_rows) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model AND t.provider = o.provider AND t.requests = 0;
        RETURN NULL;
      END $$`);
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION insert_usage_records(p_records jsonb, p_keys text[], p_kept bigint[], p_applied boolean[]) RETURNS void
      LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
      BEGIN
        INSERT INTO usage_records
        SELECT r.*
          FROM jsonb_array_elements(p_records) WITH ORDINALITY AS e(record, n),
               LATERAL jsonb_populate_record(
                 NULL::usage_records,
                 jsonb_build_object('attempts', 0) || e.record
                   || jsonb_build_object('id', usage_record_id(p_keys[e.n::int]), 'created_at', now(), 'charged_millicents', p_kept[e.n::int])
               ) AS r
         WHERE p_applied[e.n::int] AND jsonb_typeof(e.record) = 'object';
      END $$`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    // The previous texts, then the totals folded back to one row per workspace, day and model.
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION insert_usage_records(p_records jsonb, p_keys text[], p_kept bigint[], p_applied boolean[]) RETURNS void
      LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
      BEGIN
        INSERT INTO usage_records
        SELECT r.*
          FROM jsonb_array_elements(p_records) WITH ORDINALITY AS e(record, n),
               LATERAL jsonb_populate_record(
                 NULL::usage_records,
                 e.record || jsonb_build_object('id', usage_record_id(p_keys[e.n::int]), 'created_at', now(), 'charged_millicents', p_kept[e.n::int])
               ) AS r
         WHERE p_applied[e.n::int] AND jsonb_typeof(e.record) = 'object';
      END $$`);
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION usage_daily_totals_subtract() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE usage_daily_totals AS t SET
          requests = t.requests - o.requests,
          tokens = t.tokens - o.tokens,
          cost_millicents = t.cost_millicents - o.cost_millicents,
          latency_ms = t.latency_ms - o.latency_ms
          FROM (
            SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model, count(*) AS requests, sum(total_tokens) AS tokens,
                   sum(total_cost_millicents) AS cost_millicents, sum(latency_ms) AS latency_ms
              FROM old_rows
             GROUP BY 1, 2, 3
          ) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model;
        DELETE FROM usage_daily_totals AS t
         USING (SELECT DISTINCT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model FROM old_rows) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model AND t.requests = 0;
        RETURN NULL;
      END $$`);
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION usage_daily_totals_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO usage_daily_totals AS t (workspace_id, day, model, requests, tokens, cost_millicents, latency_ms)
        SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date, model, count(*), sum(total_tokens), sum(total_cost_millicents), sum(latency_ms)
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
    await queryRunner.query(`LOCK TABLE usage_records IN SHARE MODE`);
    await queryRunner.query(`DELETE FROM usage_daily_totals`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals DROP CONSTRAINT usage_daily_totals_pkey`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals DROP COLUMN provider`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals ADD PRIMARY KEY (workspace_id, day, model)`);
    await queryRunner.query(`
      INSERT INTO usage_daily_totals (workspace_id, day, model, requests, tokens, cost_millicents, latency_ms)
      SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date, model, count(*), sum(total_tokens), sum(total_cost_millicents), sum(latency_ms)
        FROM usage_records
       GROUP BY 1, 2, 3`);
    await queryRunner.query(`ALTER TABLE usage_records DROP COLUMN provider, DROP COLUMN deployment, DROP COLUMN attempts`);
  }
}
