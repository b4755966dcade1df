import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * usage_records becomes a table partitioned by UTC day (issue 34; docs/operations.md, "Usage
 * records at scale"), so that retention drops a day whole instead of deleting its rows.
 *
 * It runs outside a transaction, so that a live table is converted without a long lock (a
 * replica of the previous version may go on writing throughout):
 * 1. A unique index on (id, created_at) is built CONCURRENTLY (a partitioned table's key must
 *    hold the partition key), with the slimmer indexes of the new table (see INDEXES), and a
 *    CHECK that every row is older than the boundary (the start of the UTC day after
 *    tomorrow) is added NOT VALID, then validated (a scan that blocks no write). These take
 *    time in proportion to the rows: see the figures in docs/operations.md.
 * 2. One short transaction, under a brief ACCESS EXCLUSIVE lock (metadata only): the table is
 *    renamed usage_records_legacy, with its indexes; a partitioned usage_records is created with
 *    the same columns (in an order that wastes no alignment padding), indexes, constraints and
 *    the daily-totals triggers; the old table is attached as its partition for everything
 *    before the boundary (the CHECK spares the scan; each index of the new table finds its
 *    twin). A table with no rows (a new install) is dropped instead.
 * 3. Daily partitions are created for the days the old table does not cover, to a week
 *    ahead, and the old table's indexes that the slimmer ones replace are dropped CONCURRENTLY.
 * Writers never see a missing table: a statement that names usage_records waits for the lock,
 * then finds the new table (plans are re-made on the rename). The legacy partition's expired
 * rows are deleted in batches by retention until the whole of it is past the window, when it
 * is dropped like a day.
 *
 * usage_records_created_idx is not carried over: a range of days is partition pruning, and
 * retention no longer looks rows up by age (the converted table keeps its own, for its
 * batches). insert_usage_records() takes a record's created_at from the record when it has
 * one (the settlement's time, journaled with it), so that a settlement written again later
 * lands in the same day as the first attempt.
 */
export class PartitionedUsageRecords1764003700000 implements MigrationInterface {
  name = 'PartitionedUsageRecords1764003700000';
  /** Step 1 cannot run in a transaction (CREATE INDEX CONCURRENTLY); step 2 is its own. */
  transaction = false;

  public async up(queryRunner: QueryRunner): Promise<void> {
    // The same instant in the CHECK and the partition's bound, so that the CHECK proves the bound.
    const today = new Date();
    const boundary = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() + 2)).toISOString();
    // Converted already (a run that stopped after the swap, before it was recorded: a replica's
    // start makes the days; the old indexes left on the converted table only cost space).
    const [table] = (await queryRunner.query(`SELECT relkind FROM pg_class WHERE oid = 'usage_records'::regclass`)) as { relkind: string }[];
    if (table?.relkind === 'p') return;
    // A previous run that stopped in step 1 may have left invalid indexes or the CHECK behind.
    await queryRunner.query(`DROP INDEX CONCURRENTLY IF EXISTS usage_records_id_created_at_key`);
    await queryRunner.query(`CREATE UNIQUE INDEX CONCURRENTLY usage_records_id_created_at_key ON usage_records (id, created_at)`);
    // The slimmer indexes of the partitioned table, built beside the old ones: each must have its twin to attach to.
    for (const index of changedIndexes()) {
      await queryRunner.query(`DROP INDEX CONCURRENTLY IF EXISTS usage_records_slim_${index.name}`);
      await queryRunner.query(`CREATE INDEX CONCURRENTLY usage_records_slim_${index.name} ON usage_records ${index.on}`);
    }
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT IF EXISTS usage_records_legacy_range`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_legacy_range
         CHECK (created_at < '${boundary}'::timestamptz) NOT VALID`,
    );
    await queryRunner.query(`ALTER TABLE usage_records VALIDATE CONSTRAINT usage_records_legacy_range`);

    for (let attempt = 1; ; attempt += 1) {
      await queryRunner.query('BEGIN');
      try {
        // Waits at most this long for the writers of the moment; tries again rather than queue them all behind it.
        await queryRunner.query(`SET LOCAL lock_timeout = '3s'`);
        await queryRunner.query(`LOCK TABLE usage_records IN ACCESS EXCLUSIVE MODE`);
        await this.swap(queryRunner, boundary);
        await queryRunner.query('COMMIT');
        break;
      } catch (error) {
        await queryRunner.query('ROLLBACK');
        if (attempt >= 20 || (error as { code?: string }).code !== '55P03') throw error;
      }
    }
    // After the lock: the days the converted table does not cover (from yesterday on a new install).
    await queryRunner.query(
      `SELECT ensure_usage_record_partitions((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7)`,
    );
    // The converted table's indexes that the slimmer ones replace (its created_at index stays: retention's batches use it).
    for (const index of changedIndexes()) await queryRunner.query(`DROP INDEX CONCURRENTLY IF EXISTS usage_records_legacy_${index.name}`);
  }

  private async swap(queryRunner: QueryRunner, boundary: string): Promise<void> {
    await queryRunner.query(`ALTER TABLE usage_records RENAME TO usage_records_legacy`);
    // Dropped before the indexes are renamed (renaming its index would rename it too).
    await queryRunner.query(`ALTER TABLE usage_records_legacy DROP CONSTRAINT usage_records_pkey`);
    await queryRunner.query(`
      DO $$
      DECLARE index_name text;
      BEGIN
        FOR index_name IN SELECT indexname FROM pg_indexes WHERE tablename = 'usage_records_legacy' AND indexname LIKE 'usage\\_records\\_%' LOOP
          EXECUTE format('ALTER INDEX %I RENAME TO %I', index_name, replace(index_name, 'usage_records_', 'usage_records_legacy_'));
        END LOOP;
      END $$`);
    for (const trigger of ['insert', 'update_old', 'update_new', 'delete', 'truncate']) {
      await queryRunner.query(`DROP TRIGGER usage_daily_totals_on_${trigger} ON usage_records_legacy`);
    }
    await queryRunner.query(
      `ALTER TABLE usage_records_legacy ADD CONSTRAINT usage_records_legacy_pkey PRIMARY KEY USING INDEX usage_records_legacy_id_created_at_key`,
    );

    // Fixed-width columns first, widest first, then the variable ones (stored unaligned when short): no padding.
    await queryRunner.query(`
      CREATE TABLE usage_records (
        id uuid NOT NULL DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL,
        api_key_id uuid,
        assistant_id uuid,
        created_at timestamptz NOT NULL DEFAULT now(),
        input_tokens bigint NOT NULL DEFAULT 0,
        output_tokens bigint NOT NULL DEFAULT 0,
        total_tokens bigint NOT NULL DEFAULT 0,
        cached_tokens bigint NOT NULL DEFAULT 0,
        charged_millicents bigint NOT NULL DEFAULT 0,
        latency_ms integer NOT NULL DEFAULT 0,
        iterations integer NOT NULL DEFAULT 1,
        attempts integer NOT NULL DEFAULT 0,
        stream boolean NOT NULL DEFAULT false,
        llm_cost_millicents numeric(20, 6) NOT NULL DEFAULT 0,
        tool_cost_millicents numeric(20, 6) NOT NULL DEFAULT 0,
        total_cost_millicents numeric(20, 6) NOT NULL DEFAULT 0,
        status text NOT NULL,
        source text NOT NULL DEFAULT 'api',
        model text NOT NULL,
        provider text,
        deployment text,
        request_id text NOT NULL,
        api_key_name text,
        error_code text,
        user_id text,
        subscription_id text,
        tools_used text[] NOT NULL DEFAULT '{}',
        nerfing jsonb NOT NULL DEFAULT '[]',
        CONSTRAINT usage_records_pkey PRIMARY KEY (id, created_at),
        CONSTRAINT usage_records_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES workspaces(id) ON DELETE CASCADE,
        CONSTRAINT usage_records_status_check CHECK (status = ANY (ARRAY['success'::text, 'error'::text])),
        CONSTRAINT usage_records_source_check CHECK (source = ANY (ARRAY['api'::text, 'dashboard'::text, 'widget'::text]))
      ) PARTITION BY RANGE (created_at)`);
    for (const index of INDEXES) await queryRunner.query(`CREATE INDEX usage_records_${index.name} ON usage_records ${index.on}`);
    for (const trigger of USAGE_RECORD_TRIGGERS) await queryRunner.query(trigger);

    await queryRunner.query(
      `ALTER TABLE usage_records ATTACH PARTITION usage_records_legacy
         FOR VALUES FROM (MINVALUE) TO ('${boundary}')`,
    );
    const [legacy] = (await queryRunner.query(`SELECT EXISTS (SELECT 1 FROM usage_records_legacy) AS kept`)) as { kept: boolean }[];
    if (legacy && !legacy.kept) {
      await queryRunner.query(`ALTER TABLE usage_records DETACH PARTITION usage_records_legacy`);
      await queryRunner.query(`DROP TABLE usage_records_legacy`);
    }

    await queryRunner.query(`
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
      END $$`);
    await queryRunner.query(`
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
      END $$`);
  }

  /**
   * Back to one table: the rows are copied, under a lock for the whole copy (a rollback tool,
   * for a database of moderate size).
   */
  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('BEGIN');
    try {
      await queryRunner.query(`LOCK TABLE usage_records IN ACCESS EXCLUSIVE MODE`);
      await queryRunner.query(`CREATE TABLE usage_records_single (LIKE usage_records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`);
      await queryRunner.query(`INSERT INTO usage_records_single SELECT * FROM usage_records`);
      await queryRunner.query(`DROP TABLE usage_records`);
      await queryRunner.query(`DROP FUNCTION ensure_usage_record_partitions(date, date)`);
      await queryRunner.query(`ALTER TABLE usage_records_single RENAME TO usage_records`);
      await queryRunner.query(`ALTER TABLE usage_records ADD CONSTRAINT usage_records_pkey PRIMARY KEY (id)`);
      await queryRunner.query(
        `ALTER TABLE usage_records ADD CONSTRAINT usage_records_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES workspaces(id) ON DELETE CASCADE`,
      );
      for (const index of PREVIOUS_INDEXES) await queryRunner.query(`CREATE INDEX usage_records_${index.name} ON usage_records ${index.on}`);
      for (const trigger of USAGE_RECORD_TRIGGERS) await queryRunner.query(trigger);
      await queryRunner.query(`
        CREATE OR REPLACE FUNCTION insert_usage_records(p_records jsonb, p_keys text[], p_kept bigint[], p_applied boolean[]) RETURNS void
        LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
        BEGIN
          INSERT INTO usage_records
          SELECT r.*
            FROM jsonb_array_elements(p_records) WITH ORDINALITY AS e(record, n),
                 LATERAL jsonb_populate_record(
                   NULL::usage_records,
                   jsonb_build_object('attempts', 0) || e.record
                     || jsonb_build_object('id', usage_record_id(p_keys[e.n::int]), 'created_at', now(), 'charged_millicents', p_kept[e.n::int])
                 ) AS r
           WHERE p_applied[e.n::int] AND jsonb_typeof(e.record) = 'object';
        END $$`);
      await queryRunner.query('COMMIT');
    } catch (error) {
      await queryRunner.query('ROLLBACK');
      throw error;
    }
  }
}

interface IndexDefinition {
  /** Its name after `usage_records_`. */
  name: string;
  /** What follows `ON usage_records`. */
  on: string;
}

/**
 * The indexes of usage_records from this migration on (each partition has its own of each).
 * Slimmer than before: the pages of `(workspace_id, ...)` indexes split half full (each
 * workspace inserts at its own point), so each byte of a key costs two. Without the id, a
 * page of records sorts the ties of a millisecond (Incremental Sort on the index's order);
 * request ids are only ever looked up by equality, which a hash index does in half the bytes.
 */
const INDEXES: IndexDefinition[] = [
  { name: 'request_idx', on: 'USING hash (request_id)' },
  { name: 'workspace_created_idx', on: '(workspace_id, created_at DESC)' },
  { name: 'workspace_model_idx', on: '(workspace_id, model, created_at DESC)' },
  { name: 'workspace_assistant_idx', on: '(workspace_id, assistant_id, created_at DESC) WHERE assistant_id IS NOT NULL' },
  { name: 'workspace_key_idx', on: '(workspace_id, api_key_id, created_at DESC) WHERE api_key_id IS NOT NULL' },
  { name: 'workspace_user_idx', on: '(workspace_id, user_id, created_at DESC) WHERE user_id IS NOT NULL' },
  { name: 'workspace_errors_idx', on: "(workspace_id, created_at DESC) WHERE status = 'error'" },
  { name: 'errors_created_idx', on: "(created_at, error_code) WHERE status = 'error'" },
];

/** The indexes of the single table before this migration (what `down` makes again). */
const PREVIOUS_INDEXES: IndexDefinition[] = [
  { name: 'request_idx', on: '(request_id)' },
  { name: 'workspace_created_idx', on: '(workspace_id, created_at DESC, id DESC)' },
  { name: 'workspace_model_idx', on: '(workspace_id, model, created_at DESC, id DESC)' },
  { name: 'workspace_assistant_idx', on: '(workspace_id, assistant_id, created_at DESC, id DESC) WHERE assistant_id IS NOT NULL' },
  { name: 'workspace_key_idx', on: '(workspace_id, api_key_id, created_at DESC, id DESC) WHERE api_key_id IS NOT NULL' },
  { name: 'workspace_user_idx', on: '(workspace_id, user_id, created_at DESC, id DESC) WHERE user_id IS NOT NULL' },
  { name: 'workspace_errors_idx', on: "(workspace_id, created_at DESC, id DESC) WHERE status = 'error'" },
  { name: 'errors_created_idx', on: "(created_at, error_code) WHERE status = 'error'" },
  { name: 'created_idx', on: '(created_at)' },
];

/** The indexes this migration changes: built anew on a converted table, its old ones dropped after. */
function changedIndexes(): IndexDefinition[] {
  return INDEXES.filter((index) => PREVIOUS_INDEXES.find((previous) => previous.name === index.name)?.on !== index.on);
}

/** The statement triggers that keep usage_daily_totals equal to the records (UsageIndexes). */
const USAGE_RECORD_TRIGGERS = [
  `CREATE TRIGGER usage_daily_totals_on_insert AFTER INSERT ON usage_records
     REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_add()`,
  `CREATE TRIGGER usage_daily_totals_on_update_old AFTER UPDATE ON usage_records
     REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_subtract()`,
  `CREATE TRIGGER usage_daily_totals_on_update_new AFTER UPDATE ON usage_records
     REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_add()`,
  `CREATE TRIGGER usage_daily_totals_on_delete AFTER DELETE ON usage_records
     REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_subtract()`,
  `CREATE TRIGGER usage_daily_totals_on_truncate AFTER TRUNCATE ON usage_records FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_totals_clear()`,
];
