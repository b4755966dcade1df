import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Per-key controls (issue 33): an API key may carry a spending limit with a reset period, the
 * models and assistants it may use, its own requests per minute and the client addresses it
 * may be used from. All are nullable columns (metadata-only changes on api_keys).
 *
 * The money side of a key's limit:
 * - api_key_spend: per key and UTC day, the whole millicents its requests were charged,
 *   added by the usage records' insert trigger in the statement that charges them, so a
 *   key's spend in a period is exact and committed with its charges. Usage retention does not
 *   touch it (a month's limit must see the whole month whatever USAGE_RETENTION_DAYS is).
 * - api_key_holds: what a limited key's requests in flight hold against its limit, a row per
 *   request with an expiry (a process that died never freezes a key's budget).
 * - reserve_key_budget(): the key's one admission statement (see its source file).
 *
 * Usage records keep the key's name at the time, and are indexed by key for
 * GET /v1/usage/recent?api_key_id= (as by model, assistant and user); usage_daily_totals gains the key in its
 * grain (the nil UUID for requests made without a key: the widget, the playground), so that
 * GET /v1/usage filters and groups by key from the totals. Its rows are rebuilt from the
 * records, so that the records written before this migration are split by key too.
 */
export class KeyLimits1764003500000 implements MigrationInterface {
  name = 'KeyLimits1764003500000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      ALTER TABLE api_keys
        ADD COLUMN spend_limit_millicents bigint CHECK (spend_limit_millicents >= 0),
        ADD COLUMN spend_limit_period text NOT NULL DEFAULT 'none' CHECK (spend_limit_period IN ('none', 'daily', 'weekly', 'monthly')),
        ADD COLUMN allowed_models text[],
        ADD COLUMN allowed_assistants text[],
        ADD COLUMN rate_limit_rpm integer CHECK (rate_limit_rpm > 0),
        ADD COLUMN allowed_ips text[]`);
    await queryRunner.query(`ALTER TABLE usage_records ADD COLUMN api_key_name text`);
    // GET /v1/usage/recent?api_key_id=: like its other filters, a prefix of an index.
    await queryRunner.query(`
      CREATE INDEX usage_records_workspace_key_idx ON usage_records (workspace_id, api_key_id, created_at DESC, id DESC)
       WHERE api_key_id IS NOT NULL`);

    await queryRunner.query(`
      CREATE TABLE api_key_spend (
        api_key_id uuid NOT NULL,
        day date NOT NULL,
        charged_millicents bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (api_key_id, day)
      )`);
    await queryRunner.query(`
      INSERT INTO api_key_spend (api_key_id, day, charged_millicents)
      SELECT api_key_id, (created_at AT TIME ZONE 'UTC')::date, sum(charged_millicents)
        FROM usage_records WHERE api_key_id IS NOT NULL GROUP BY 1, 2`);
    await queryRunner.query(`
      CREATE TABLE api_key_holds (
        id uuid PRIMARY KEY,
        api_key_id uuid NOT NULL,
        amount_millicents bigint NOT NULL CHECK (amount_millicents > 0),
        expires_at timestamptz NOT NULL
      )`);
    await queryRunner.query(`CREATE INDEX api_key_holds_key_idx ON api_key_holds (api_key_id)`);

    await queryRunner.query(`ALTER TABLE usage_daily_totals ADD COLUMN api_key_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000'`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals DROP CONSTRAINT usage_daily_totals_pkey`);
    await queryRunner.query(`TRUNCATE usage_daily_totals`);
    await queryRunner.query(`
      INSERT INTO usage_daily_totals (workspace_id, day, model, provider, api_key_id, requests, tokens, cost_millicents, latency_ms)
      SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date, model, coalesce(provider, ''),
             coalesce(api_key_id, '00000000-0000-0000-0000-000000000000'), count(*), sum(total_tokens), sum(total_cost_millicents), sum(latency_ms)
        FROM usage_records GROUP BY 1, 2, 3, 4, 5`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals ADD PRIMARY KEY (workspace_id, day, model, provider, api_key_id)`);

    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION usage_daily_totals_add() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO usage_daily_totals AS t (workspace_id, day, model, provider, api_key_id, requests, tokens, cost_millicents, latency_ms)
        SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date, model, coalesce(provider, ''),
               coalesce(api_key_id, '00000000-0000-0000-0000-000000000000'), count(*), sum(total_tokens), sum(total_cost_millicents), sum(latency_ms)
          FROM new_rows
         GROUP BY 1, 2, 3, 4, 5
         ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (workspace_id, day, model, provider, api_key_id) DO UPDATE SET
          requests = t.requests + excluded.requests,
          tokens = t.tokens + excluded.tokens,
          cost_millicents = t.cost_millicents + excluded.cost_millicents,
          latency_ms = t.latency_ms + excluded.latency_ms;
        -- Spend only ever grows: a record's charge never changes, and retention keeps the spend.
        IF TG_OP <> 'INSERT' THEN RETURN NULL; END IF;
        INSERT INTO api_key_spend AS s (api_key_id, day, charged_millicents)
        SELECT api_key_id, (created_at AT TIME ZONE 'UTC')::date, sum(charged_millicents)
          FROM new_rows
         WHERE api_key_id IS NOT NULL AND charged_millicents > 0
         GROUP BY 1, 2
         ORDER BY 1, 2
        ON CONFLICT (api_key_id, day) DO UPDATE SET charged_millicents = s.charged_millicents + excluded.charged_millicents;
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
            SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model, coalesce(provider, '') AS provider,
                   coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id, count(*) AS requests,
                   sum(total_tokens) AS tokens, sum(total_cost_millicents) AS cost_millicents, sum(latency_ms) AS latency_ms
              FROM old_rows
             GROUP BY 1, 2, 3, 4, 5
          ) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model AND t.provider = o.provider AND t.api_key_id = o.api_key_id;
        DELETE FROM usage_daily_totals AS t
         USING (SELECT DISTINCT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model, coalesce(provider, '') AS provider,
                       coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id FROM old_rows) AS o
         WHERE t.workspace_id = o.workspace_id AND t.day = o.day AND t.model = o.model AND t.provider = o.provider
           AND t.api_key_id = o.api_key_id AND t.requests = 0;
        RETURN NULL;
      END $$`);
    await queryRunner.query(`
      CREATE FUNCTION reserve_key_budget(p_key uuid, p_hold uuid, p_amount bigint, p_limit bigint, p_period text, p_ttl_ms double precision)
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        since date := CASE p_period WHEN 'none' THEN '-infinity'::date
                                    ELSE date_trunc(CASE p_period WHEN 'daily' THEN 'day' WHEN 'weekly' THEN 'week' ELSE 'month' END,
                                                    now() AT TIME ZONE 'UTC')::date END;
        spent bigint;
        held bigint;
        remaining bigint;
      BEGIN
        -- One admission of the key at a time: each statement below then sees every hold and
        -- charge that committed before (READ COMMITTED takes a snapshot per statement).
        PERFORM 1 FROM api_keys WHERE id = p_key FOR NO KEY UPDATE;
        DELETE FROM api_key_holds WHERE api_key_id = p_key AND expires_at < now();
        SELECT coalesce(sum(charged_millicents), 0) INTO spent FROM api_key_spend WHERE api_key_id = p_key AND day >= since;
        SELECT coalesce(sum(amount_millicents), 0) INTO held FROM api_key_holds WHERE api_key_id = p_key;
        remaining := p_limit - spent - held;
        IF remaining >= p_amount THEN
          INSERT INTO api_key_holds AS h (id, api_key_id, amount_millicents, expires_at)
          VALUES (p_hold, p_key, p_amount, now() + make_interval(secs => p_ttl_ms / 1000))
          ON CONFLICT (id) DO UPDATE SET amount_millicents = h.amount_millicents + excluded.amount_millicents, expires_at = excluded.expires_at;
        END IF;
        RETURN remaining;
      END $$`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP FUNCTION reserve_key_budget(uuid, uuid, bigint, bigint, text, double precision)`);
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
    await queryRunner.query(`ALTER TABLE usage_daily_totals DROP CONSTRAINT usage_daily_totals_pkey`);
    await queryRunner.query(`TRUNCATE usage_daily_totals`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals DROP COLUMN api_key_id`);
    await queryRunner.query(`
      INSERT INTO usage_daily_totals (workspace_id, day, model, provider, requests, tokens, cost_millicents, latency_ms)
      SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date, model, coalesce(provider, ''), count(*), sum(total_tokens),
             sum(total_cost_millicents), sum(latency_ms)
        FROM usage_records GROUP BY 1, 2, 3, 4`);
    await queryRunner.query(`ALTER TABLE usage_daily_totals ADD PRIMARY KEY (workspace_id, day, model, provider)`);
    await queryRunner.query(`DROP TABLE api_key_holds`);
    await queryRunner.query(`DROP TABLE api_key_spend`);
    await queryRunner.query(`DROP INDEX usage_records_workspace_key_idx`);
    await queryRunner.query(`ALTER TABLE usage_records DROP COLUMN api_key_name`);
    await queryRunner.query(`
      ALTER TABLE api_keys DROP COLUMN spend_limit_millicents, DROP COLUMN spend_limit_period, DROP COLUMN allowed_models,
        DROP COLUMN allowed_assistants, DROP COLUMN rate_limit_rpm, DROP COLUMN allowed_ips`);
  }
}
