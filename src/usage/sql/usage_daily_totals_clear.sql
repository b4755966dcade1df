-- usage_daily_totals_clear(): Empties usage_daily_totals when usage_records is truncated (statement trigger).
-- As migrations/1764000200000-UsageIndexes.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE FUNCTION usage_daily_totals_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  TRUNCATE usage_daily_totals;
  RETURN NULL;
END $$;
