-- usage_daily_totals_subtract(): Subtracts the usage records deleted (or an update's old versions) from usage_daily_totals (statement trigger).
-- As migrations/1764003500000-KeyLimits.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

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
END $$;
