-- usage_record_id(): The id of a settlement's usage record, derived from its key: a record is never inserted twice.
-- As migrations/1764002300000-SettlementRecordIds.ts last defined it. To change it, edit this file and add a
-- migration that applies the new text (see src/billing/billing.module.ts, "Changing an SQL function").

CREATE FUNCTION usage_record_id(p_key text) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
  SELECT encode(set_byte(set_byte(d, 6, (get_byte(d, 6) & 15) | 128), 8, (get_byte(d, 8) & 63) | 128), 'hex')::uuid
    FROM (SELECT decode(md5('usage:' || p_key), 'hex') AS d) AS digest
$$;
