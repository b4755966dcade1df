-- usage_daily_totals_add(): Adds the usage records inserted (or an update's new versions) to usage_daily_totals (statement trigger).
-- As migrations/1764003250000-UsageAnswerer.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

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
END $$;
