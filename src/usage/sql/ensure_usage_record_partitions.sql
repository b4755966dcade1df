-- ensure_usage_record_partitions(): Creates the missing daily partitions of usage_records from p_from to p_to (UTC days, both included); returns how many it created.
-- As migrations/1764003700000-PartitionedUsageRecords.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE FUNCTION ensure_usage_record_partitions(p_from date, p_to date) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  day date;
  partition_name text;
  created integer := 0;
BEGIN
  -- Every replica may call this at once: one creates, the others then find the days there.
  PERFORM pg_advisory_xact_lock(4242102);
  FOR day IN SELECT d::date FROM generate_series(p_from, p_to, interval '1 day') AS d LOOP
    partition_name := 'usage_records_p' || to_char(day, 'YYYYMMDD');
    CONTINUE WHEN to_regclass(partition_name) IS NOT NULL;
    BEGIN
      -- Created apart, then attached: ATTACH locks the parent in SHARE UPDATE EXCLUSIVE mode,
      -- which blocks no read or write of the records (CREATE TABLE ... PARTITION OF would).
      EXECUTE format('CREATE TABLE %I (LIKE usage_records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', partition_name);
      EXECUTE format('ALTER TABLE usage_records ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', partition_name,
                     day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
      created := created + 1;
    EXCEPTION WHEN invalid_object_definition THEN
      -- The day is covered already: by the converted table (usage_records_legacy).
      NULL;
    END;
  END LOOP;
  RETURN created;
END $$;
