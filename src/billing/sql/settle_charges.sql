-- settle_charges(): Settles a batch of requests in one statement: the charges, the hold releases or lease
-- debits, each wallet written once, the ledger rows and the usage records (WalletService.settleMany).
-- The second definition is the ten-argument wrapper kept for replicas of the previous version.
-- As migrations/1764002300000-SettlementRecordIds.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE FUNCTION settle_charges(
  p_keys text[],
  p_workspace_ids uuid[],
  p_hold_row_ids uuid[],
  p_leased boolean[],
  p_cost_micros bigint[],
  p_refunds boolean[],
  p_descriptions text[],
  p_check_applied boolean,
  p_synchronous_commit text,
  p_records jsonb,
  p_records_optional boolean
) RETURNS TABLE (
  charged_millicents bigint,
  kept_millicents bigint,
  written_off_millicents bigint,
  balance_after_millicents bigint,
  applied boolean,
  released_from_lease_millicents bigint,
  below_threshold boolean,
  record_error text
) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
  micros CONSTANT bigint := 1000000;
  orders int := coalesce(array_length(p_keys, 1), 0);
  -- The locked wallets (w_*) and holds (h_*), in lock order, as the plan changes them.
  w_ids uuid[]; w_balance bigint[]; w_reserved bigint[]; w_carry bigint[]; w_threshold bigint[];
  h_ids uuid[]; h_amount bigint[]; h_live boolean[]; h_changed boolean[];
  -- What each order did (o_*), and the ledger rows (l_*), in order.
  o_charged bigint[]; o_kept bigint[]; o_written_off bigint[]; o_balance bigint[]; o_applied boolean[]; o_released bigint[];
  l_workspace uuid[] := '{}'; l_type text[] := '{}'; l_amount bigint[] := '{}'; l_balance bigint[] := '{}';
  l_description text[] := '{}'; l_key text[] := '{}';
  refused_record text;
  w int; h int; held bigint; carry_before bigint; total bigint; whole bigint; coverable bigint; charged bigint; released bigint;
BEGIN
  PERFORM set_config('synchronous_commit', p_synchronous_commit, true);

  -- Each array_agg reads the same rows in the same order, so the arrays line up.
  SELECT coalesce(array_agg(id), '{}'), coalesce(array_agg(amount_millicents), '{}')
    INTO h_ids, h_amount
    FROM (SELECT id, amount_millicents FROM wallet_holds WHERE id = ANY(p_hold_row_ids) ORDER BY id FOR UPDATE) locked;
  h_live := array_fill(true, ARRAY[coalesce(array_length(h_ids, 1), 0)]);
  h_changed := array_fill(false, ARRAY[coalesce(array_length(h_ids, 1), 0)]);

  SELECT coalesce(array_agg(workspace_id), '{}'), coalesce(array_agg(balance_millicents), '{}'),
         coalesce(array_agg(reserved_millicents), '{}'), coalesce(array_agg((carry_millicents * micros)::bigint), '{}'),
         coalesce(array_agg(threshold), '{}')
    INTO w_ids, w_balance, w_reserved, w_carry, w_threshold
    FROM (SELECT w.workspace_id, w.balance_millicents, w.reserved_millicents, w.carry_millicents,
                 CASE WHEN s.enabled THEN s.threshold_millicents END AS threshold
            FROM wallets w LEFT JOIN auto_topup_settings s ON s.workspace_id = w.workspace_id
           WHERE w.workspace_id = ANY(p_workspace_ids)
           ORDER BY w.workspace_id FOR UPDATE OF w) locked;

  FOR i IN 1 .. orders LOOP
    w := array_position(w_ids, p_workspace_ids[i]);
    IF w IS NULL THEN
      RAISE EXCEPTION 'No wallet for workspace %', p_workspace_ids[i];
    END IF;
    IF p_check_applied THEN
      -- What the earlier settlement charged (its usage ledger row), if it committed.
      charged := (SELECT -amount_millicents FROM wallet_transactions WHERE idempotency_key = 'usage:' || p_keys[i]);
      IF charged IS NOT NULL
         OR EXISTS (SELECT 1 FROM usage_records WHERE id = usage_record_id(p_keys[i])) THEN
        o_charged[i] := 0; o_kept[i] := 0; o_written_off[i] := 0; o_balance[i] := w_balance[w]; o_applied[i] := false;
        -- Taken out of the lease then; almost always all of it (less only if the lease ran short).
        o_released[i] := CASE WHEN p_leased[i] THEN coalesce(charged, 0) ELSE 0 END;
        CONTINUE;
      END IF;
    END IF;
    h := array_position(h_ids, p_hold_row_ids[i]);
    IF h IS NOT NULL AND NOT h_live[h] THEN h := NULL; END IF;
    -- A hold swept meanwhile (its process stalled past the expiry) sets nothing aside any more.
    held := CASE WHEN h IS NULL THEN 0 ELSE h_amount[h] END;
    carry_before := w_carry[w];
    total := w_carry[w] + p_cost_micros[i];
    whole := total / micros;
    coverable := greatest(w_balance[w] - (w_reserved[w] - held), 0);
    charged := least(whole, coverable);
    w_carry[w] := CASE WHEN whole <= coverable THEN total % micros ELSE 0 END;
    w_balance[w] := w_balance[w] - charged;
    released := 0;
    IF NOT p_leased[i] THEN
      w_reserved[w] := w_reserved[w] - held;
      IF h IS NOT NULL THEN h_live[h] := false; END IF;
    ELSIF h IS NOT NULL THEN
      released := least(charged, held);
      w_reserved[w] := w_reserved[w] - released;
      h_amount[h] := held - released;
      h_changed[h] := true;
    END IF;
    IF charged > 0 THEN
      l_workspace := l_workspace || p_workspace_ids[i]; l_type := l_type || 'usage'::text; l_amount := l_amount || -charged;
      l_balance := l_balance || w_balance[w]; l_description := l_description || p_descriptions[i]; l_key := l_key || ('usage:' || p_keys[i]);
    END IF;
    o_kept[i] := charged;
    IF p_refunds[i] THEN
      w_balance[w] := w_balance[w] + charged;
      w_carry[w] := carry_before;
      o_kept[i] := 0;
      IF charged > 0 THEN
        l_workspace := l_workspace || p_workspace_ids[i]; l_type := l_type || 'refund'::text; l_amount := l_amount || charged;
        l_balance := l_balance || w_balance[w]; l_description := l_description || ('Refund: ' || p_descriptions[i]);
        l_key := l_key || ('refund:' || p_keys[i]);
      END IF;
    END IF;
    o_charged[i] := charged; o_written_off[i] := whole - charged; o_balance[i] := w_balance[w];
    o_applied[i] := true; o_released[i] := released;
  END LOOP;

  -- The writes in one statement (each statement has a fixed cost of its own): the holds
  -- released and the leases changed are different rows of wallet_holds.
  WITH wallet_updates AS (
    UPDATE wallets AS t
       SET balance_millicents = v.balance, reserved_millicents = v.reserved, carry_millicents = v.carry::numeric / micros, updated_at = now()
      FROM unnest(w_ids, w_balance, w_reserved, w_carry) AS v(workspace_id, balance, reserved, carry)
     WHERE t.workspace_id = v.workspace_id),
       released AS (
    DELETE FROM wallet_holds AS t USING unnest(h_ids, h_live) AS v(id, live) WHERE NOT v.live AND t.id = v.id),
       leases AS (
    UPDATE wallet_holds AS t SET amount_millicents = v.amount
      FROM unnest(h_ids, h_amount, h_changed) AS v(id, amount, changed)
     WHERE v.changed AND t.id = v.id)
  INSERT INTO wallet_transactions (workspace_id, type, amount_millicents, balance_after_millicents, description, idempotency_key, created_at)
  SELECT v.workspace_id, v.type, v.amount, v.balance_after, v.description, v.idempotency_key, now() + (v.n - 1) * interval '1 microsecond'
    FROM unnest(l_workspace, l_type, l_amount, l_balance, l_description, l_key)
         WITH ORDINALITY AS v(workspace_id, type, amount, balance_after, description, idempotency_key, n);
  IF p_records IS NOT NULL AND p_records_optional THEN
    -- A subtransaction (a savepoint), only on this rare path: it costs a write of its own.
    BEGIN
      PERFORM insert_usage_records(p_records, p_keys, o_kept, o_applied);
    EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
      refused_record := SQLSTATE || ': ' || SQLERRM;
    END;
  ELSIF p_records IS NOT NULL THEN
    PERFORM insert_usage_records(p_records, p_keys, o_kept, o_applied);
  END IF;

  RETURN QUERY
  SELECT o_charged[i], o_kept[i], o_written_off[i], o_balance[i], o_applied[i], o_released[i],
         coalesce(w_balance[array_position(w_ids, p_workspace_ids[i])] < w_threshold[array_position(w_ids, p_workspace_ids[i])], false),
         refused_record
    FROM generate_series(1, orders) AS i
   ORDER BY i;
END $$;

CREATE FUNCTION settle_charges(
  p_keys text[], p_workspace_ids uuid[], p_hold_row_ids uuid[], p_leased boolean[], p_cost_micros bigint[],
  p_refunds boolean[], p_descriptions text[], p_check_applied boolean, p_synchronous_commit text, p_records jsonb
) RETURNS TABLE (
  charged_millicents bigint, kept_millicents bigint, written_off_millicents bigint, balance_after_millicents bigint,
  applied boolean, released_from_lease_millicents bigint, below_threshold boolean
) LANGUAGE sql AS $$
  SELECT s.charged_millicents, s.kept_millicents, s.written_off_millicents, s.balance_after_millicents,
         s.applied, s.released_from_lease_millicents, s.below_threshold
    FROM settle_charges(p_keys, p_workspace_ids, p_hold_row_ids, p_leased, p_cost_micros,
                        p_refunds, p_descriptions, p_check_applied, p_synchronous_commit, p_records, false) AS s
$$;
