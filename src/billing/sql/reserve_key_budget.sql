-- reserve_key_budget(): Holds a request's estimate against its API key's spending limit, if what the key spent in the period and holds leaves room; returns what was left before it.
-- As migrations/1764003500000-KeyLimits.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

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
END $$;
