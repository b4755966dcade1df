-- insert_usage_records(): Inserts a settlement batch's usage records, their ids derived from the settlement keys (settle_charges), at the record's created_at when it has one.
-- As migrations/1764003700000-PartitionedUsageRecords.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE OR REPLACE FUNCTION insert_usage_records(p_records jsonb, p_keys text[], p_kept bigint[], p_applied boolean[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  INSERT INTO usage_records
  SELECT r.*
    FROM jsonb_array_elements(p_records) WITH ORDINALITY AS e(record, n),
         LATERAL jsonb_populate_record(
           NULL::usage_records,
           jsonb_build_object('attempts', 0, 'created_at', now()) || e.record
             || jsonb_build_object('id', usage_record_id(p_keys[e.n::int]), 'charged_millicents', p_kept[e.n::int])
         ) AS r
   WHERE p_applied[e.n::int] AND jsonb_typeof(e.record) = 'object';
END $$;
