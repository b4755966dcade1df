-- usage_daily_totals_add(): Adds the usage records inserted (or an update's new versions) to usage_daily_totals (statement trigger).
-- As migrations/1764000200000-UsageIndexes.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE FUNCTION usage_daily_totals_add() RETURNS trigger LANGUAGE plpgsql AS $$
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
END $$;
