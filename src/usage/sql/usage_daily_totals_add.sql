-- usage_daily_totals_add(): Adds the usage records inserted (or an update's new versions) to usage_daily_totals (statement trigger). Inserted records add their charges to api_key_spend.
-- As migrations/1764003500000-KeyLimits.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

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
END $$;
