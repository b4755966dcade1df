/**
 * Does the data tier hold at tens of millions of usage records?
 *
 * Starts its own embedded PostgreSQL (bench/harness.ts) and the real app, signs a person up
 * through the pages (their workspace is the largest one, the one measured), and fills the
 * database with set-based INSERT ... SELECT generate_series, one UTC day per statement:
 *   - 10,000 workspaces (bench/installation.ts), each with a wallet, an owner and an API key;
 *   - BENCH_RECORDS usage records (default 1,000,000) over the 90 days of the retention
 *     window, skewed: workspace k of 10,000 takes a share that falls as u^3, so the largest
 *     (the signed-up one, on four keys) has about 4.6% and the tail a few each; 8 models of
 *     3 providers, 4 per workspace, 2% errors under 4 codes, a third with an end user id, as
 *     many bytes per column as the service writes (36-character request ids and so on);
 *   - BENCH_LEDGER_ROWS usage ledger rows (default a tenth of the records), skewed the same.
 * Each day's records go through the parent table, so usage_daily_totals is kept by its own
 * triggers; each day's statement runs under EXPLAIN ANALYZE, whose trigger timings say how much
 * of the insert the totals' trigger and the foreign key cost.
 *
 * Then it reports the bytes per usage record and per ledger row (heap, indexes and TOAST),
 * checks that usage_daily_totals equals the records, times each usage endpoint and dashboard
 * page of the largest workspace over HTTP (time to first byte, p50 and p95 of 20 requests after
 * one untimed warm-up), and times a retention run that removes the oldest day, then one with
 * nothing to remove.
 *
 *   npm run bench:data                                   # 1,000,000 records
 *   BENCH_RECORDS=30000000 npm run bench:data            # or: node dist/bench/data-scale.js --records 30000000
 *
 * Exit code: 0 every page's p95 TTFB under 100 ms, 2 some page over it, 1 error (or totals wrong).
 */
import 'reflect-metadata';
import * as os from 'node:os';
import { type BenchContext, coverUsageDays, numberOption, runBench, signUp, summarize, table, timedGet, writeResults } from './harness';
import { apiKeyIdSql, seedWorkspaces, workspaceIdSql } from './installation';

const DAY_MS = 86_400_000;

const RECORDS = numberOption('records', 'BENCH_RECORDS', 1_000_000);
const SETTINGS = {
  records: RECORDS,
  ledgerRows: numberOption('ledger-rows', 'BENCH_LEDGER_ROWS', Math.ceil(RECORDS / 10)),
  /** Connections loading days at once. */
  workers: numberOption('workers', 'BENCH_WORKERS', 2),
  workspaces: 10_000,
  days: 90,
  /** Timed requests per page, after one untimed warm-up. */
  repetitions: 20,
  targetTtfbMs: 100,
  hardTimeoutMs: 3 * 3_600_000,
};

/** Model, provider, deployment, and the prices in millicents per million input and output tokens. */
const MODELS = [
  ['gpt-4o', 'openai', 'openai-primary', 250_000, 1_000_000],
  ['gpt-4o-mini', 'openai', 'openai-primary', 15_000, 60_000],
  ['gpt-4-turbo', 'openai', 'azure-eastus', 1_000_000, 3_000_000],
  ['o4-mini', 'openai', 'openai-primary', 110_000, 440_000],
  ['claude-sonnet-4-6', 'anthropic', 'anthropic', 300_000, 1_500_000],
  ['claude-haiku-4-5', 'anthropic', 'bedrock-us', 100_000, 500_000],
  ['gemini-2.5-pro', 'google', 'vertex-europe', 125_000, 1_000_000],
  ['gemini-2.5-flash', 'google', 'gemini', 30_000, 250_000],
] as const;
const column = <I extends 0 | 1 | 2 | 3 | 4>(i: I) => MODELS.map((m) => m[i]);
const ERROR_CODES = ['upstream_error', 'upstream_timeout', 'context_length_exceeded', 'rate_limit_exceeded'];
const KEY_NAMES = ['production', 'staging', 'batch jobs', 'support bot'];

const round1 = (v: number) => Math.round(v * 10) / 10;
const round2 = (v: number) => Math.round(v * 100) / 100;
const thousands = (v: number) => Math.round(v).toLocaleString('en-US');

/**
 * SQL of the row number g's draws, as columns r (the row's own hash, for its values) and k (its
 * workspace: 1 + floor(W x u^3), u uniform in [0, 1), so workspace 1 is the busiest).
 */
const draws = (series: string) => `
  ${series},
  LATERAL (SELECT hashint8(g) & 2147483647 AS r,
                  1 + floor(${SETTINGS.workspaces} * power((hashint8extended(g, 1) & 1048575) / 1048576.0, 3))::int AS k) AS d`;

/**
 * One day's usage records, rows $2 to $2 + $3 - 1 spread evenly from $4 to $5 in time order.
 * $1 the workspaces' ids and $6 their keys' (k = 1 the largest), $7 the largest's keys and $8 their names.
 */
const RECORDS_SQL = `
  INSERT INTO usage_records (workspace_id, request_id, api_key_id, api_key_name, model, provider, deployment, attempts,
                             input_tokens, output_tokens, total_tokens, cached_tokens, llm_cost_millicents, tool_cost_millicents,
                             total_cost_millicents, charged_millicents, latency_ms, status, error_code, user_id, stream, source, created_at)
  SELECT ($1::uuid[])[k], 'req_' || md5(g::text),
         CASE WHEN k = 1 THEN ($7::uuid[])[1 + r % 4] ELSE ($6::uuid[])[k] END,
         CASE WHEN k = 1 THEN ($8::text[])[1 + r % 4] ELSE 'default' END,
         ('{${column(0).join(',')}}'::text[])[m],
         CASE WHEN NOT failed THEN ('{${column(1).join(',')}}'::text[])[m] END,
         CASE WHEN NOT failed THEN ('{${column(2).join(',')}}'::text[])[m] END,
         CASE WHEN failed THEN 2 ELSE 1 END,
         input, output, input + output, CASE WHEN r % 4 = 0 THEN input / 2 ELSE 0 END,
         cost, 0, cost, ceil(cost), 200 + (r / 13) % 6000,
         CASE WHEN failed THEN 'error' ELSE 'success' END,
         CASE WHEN failed THEN ('{${ERROR_CODES.join(',')}}'::text[])[1 + (r / 50) % 4] END,
         CASE WHEN r % 3 = 0 THEN 'user-' || (r / 3) % 5000 END,
         r % 3 = 1, 'api',
         $4::timestamptz + ($5::timestamptz - $4::timestamptz) * ((g - $2)::double precision / $3)
    FROM (SELECT g, k, r, failed, 1 + (k + r % 4) % 8 AS m,
                 CASE WHEN failed THEN 0 ELSE 50 + r % 4000 END AS input,
                 CASE WHEN failed THEN 0 ELSE 10 + (r / 7) % 1500 END AS output
            FROM ${draws('generate_series($2::bigint, $2::bigint + $3 - 1) AS g')},
                 LATERAL (SELECT r % 50 = 0 AS failed) AS f) AS base,
         LATERAL (SELECT round((input * ('{${column(3).join(',')}}'::numeric[])[m]
                              + output * ('{${column(4).join(',')}}'::numeric[])[m]) / 1000000, 6) AS cost) AS priced`;

/** One day's usage ledger rows, as settle_charges writes them: rows $2 to $2 + $3 - 1, from $4 to $5. $1 the workspaces' ids. */
const LEDGER_SQL = `
  INSERT INTO wallet_transactions (workspace_id, type, amount_millicents, balance_after_millicents, description, idempotency_key, created_at)
  SELECT ($1::uuid[])[k], 'usage', -(1 + r % 5000), 1000000000 - r % 1000000,
         'API usage: ' || ('{${column(0).join(',')}}'::text[])[1 + (k + r % 4) % 8], 'usage:req_' || md5('ledger' || g),
         $4::timestamptz + ($5::timestamptz - $4::timestamptz) * ((g - $2)::double precision / $3)
    FROM ${draws('generate_series($2::bigint, $2::bigint + $3 - 1) AS g')}`;

/** What EXPLAIN (ANALYZE, FORMAT JSON) of an INSERT ... SELECT says, in ms. */
interface ExplainedInsert {
  Plan: { 'Actual Total Time': number; Plans: { 'Actual Total Time': number }[] };
  /** A foreign key's check names its constraint. */
  Triggers: { 'Trigger Name': string; 'Constraint Name'?: string; Time: number }[];
}

async function main({ databaseUrl, log, startApp, startedAt }: BenchContext): Promise<number> {
  const { ApiKeysService } = await import('../src/workspaces/api-keys.service');
  const { WorkspacesService } = await import('../src/workspaces/workspaces.service');
  const { UsageRetention } = await import('../src/usage/usage-retention');

  log(
    `Machine: ${os.cpus().length} CPUs (${os.cpus()[0]?.model}), ${round1(os.totalmem() / 2 ** 30)} GiB memory, Node ${process.version}, ` +
      `1-min load ${round2(os.loadavg()[0])}; ${thousands(SETTINGS.records)} usage records, ${thousands(SETTINGS.ledgerRows)} ledger rows`,
  );
  const { app, config, baseUrl } = await startApp();
  const { cookie, workspaceId } = await signUp(baseUrl, 'largest@example.com', 'Largest Workspace');
  await app.get(WorkspacesService).setTier(workspaceId, 'enterprise', -1);
  const keys: { id: string; apiKey: string }[] = [];
  for (const name of KEY_NAMES) keys.push(await app.get(ApiKeysService).create(workspaceId, name));

  // A connection of its own, outside the app's pool and its statement timeout: a day of records takes longer.
  const { Client } = await import('pg');
  const seeder = new Client({ connectionString: databaseUrl });
  await seeder.connect();
  const seed = async (sql: string, parameters?: unknown[]): Promise<unknown[]> => (await seeder.query(sql, parameters)).rows as unknown[];
  // A bulk load writes tens of GB of WAL: checkpoints every 1 GB (the default) would write every page many times.
  await seed(`ALTER SYSTEM SET max_wal_size = '8GB'`);
  await seed(`ALTER SYSTEM SET checkpoint_timeout = '30min'`);
  await seed('SELECT pg_reload_conf()');
  const [pg] = (await seed(`SELECT version() AS version, current_setting('shared_buffers') AS shared_buffers`)) as Record<string, string>[];
  log(`${pg.version.split(' on ')[0]}, shared_buffers ${pg.shared_buffers}; max_wal_size 8GB and checkpoint_timeout 30min for the load`);

  // --- Data ------------------------------------------------------------------------------
  await seedWorkspaces(seed, { first: 2, last: SETTINGS.workspaces, members: 0 });
  const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
  const firstDay = today - (SETTINGS.days - 1) * DAY_MS;
  const isoDay = (t: number) => new Date(t).toISOString().slice(0, 10);
  await coverUsageDays(seeder, SETTINGS.days - 1);

  // Workspace k's id and its key's, k from 1 (the largest) to W: read by index, not hashed again for every row.
  const [ids] = (await seed(
    `SELECT array_agg(CASE WHEN g = 1 THEN $1::uuid ELSE ${workspaceIdSql('g')} END ORDER BY g) AS workspaces,
            array_agg(${apiKeyIdSql('g')} ORDER BY g) AS keys
       FROM generate_series(1, ${SETTINGS.workspaces}) AS g`,
    [workspaceId],
  )) as { workspaces: string[]; keys: string[] }[];
  const largestKeys = keys.map((k) => k.id);

  // The days in order, shared by the workers: each takes the next day not taken.
  const days = Array.from({ length: SETTINGS.days }, (_, day) => ({
    from: new Date(firstDay + day * DAY_MS),
    until: day === SETTINGS.days - 1 ? new Date() : new Date(firstDay + (day + 1) * DAY_MS),
    firstRecord: Math.floor((SETTINGS.records * day) / SETTINGS.days),
    records: Math.floor((SETTINGS.records * (day + 1)) / SETTINGS.days) - Math.floor((SETTINGS.records * day) / SETTINGS.days),
    firstLedgerRow: Math.floor((SETTINGS.ledgerRows * day) / SETTINGS.days),
    ledgerRows: Math.floor((SETTINGS.ledgerRows * (day + 1)) / SETTINGS.days) - Math.floor((SETTINGS.ledgerRows * day) / SETTINGS.days),
  }));
  const loadStarted = Date.now();
  const spentMs = new Map<string, number>();
  const spend = (name: string, ms: number) => spentMs.set(name, (spentMs.get(name) ?? 0) + ms);
  let recordsDone = 0;
  let ledgerDone = 0;
  let next = 0;
  const worker = async () => {
    const connection = new Client({ connectionString: databaseUrl });
    await connection.connect();
    try {
      for (let day = next++; day < days.length; day = next++) {
        const d = days[day];
        const dayStarted = Date.now();
        const { rows } = await connection.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${RECORDS_SQL}`, [
          ids.workspaces, d.firstRecord, d.records, d.from, d.until, ids.keys, largestKeys, KEY_NAMES,
        ]);
        const [plan] = (rows as { 'QUERY PLAN': ExplainedInsert[] }[])[0]['QUERY PLAN'];
        // Where the statement's time went: making the rows (the insert's input), writing them with their index entries, the triggers.
        const generated = plan.Plan.Plans[0]['Actual Total Time'];
        spend('generating the rows', generated);
        spend('writing rows and index entries', plan.Plan['Actual Total Time'] - generated);
        for (const t of plan.Triggers) spend(`trigger ${t['Constraint Name'] ?? t['Trigger Name']}`, t.Time);
        const recordsMs = Date.now() - dayStarted;
        await connection.query(LEDGER_SQL, [ids.workspaces, d.firstLedgerRow, d.ledgerRows, d.from, d.until]);
        // What autovacuum does to a day once written (the visibility map lets the pages' queries skip the heap), timed here.
        const vacuumStarted = Date.now();
        await connection.query(`VACUUM (ANALYZE) usage_records_p${isoDay(d.from.getTime()).replace(/-/g, '')}`);
        spend('VACUUM (ANALYZE) of the day', Date.now() - vacuumStarted);
        recordsDone += d.records;
        ledgerDone += d.ledgerRows;
        const elapsed = (Date.now() - loadStarted) / 1000;
        log(
          `day ${day + 1}/${SETTINGS.days} ${isoDay(d.from.getTime())}: ${thousands(d.records)} records in ${round1(recordsMs / 1000)} s ` +
            `(${thousands(d.records / (recordsMs / 1000))}/s), ${thousands(d.ledgerRows)} ledger rows; so far ${thousands(recordsDone)} records, ` +
            `${thousands(recordsDone / elapsed)} records/s overall, ${round1(elapsed / 60)} min, ` +
            `about ${round1((SETTINGS.records - recordsDone) / (recordsDone / elapsed) / 60)} min to go`,
        );
      }
    } finally {
      await connection.end();
    }
  };
  await Promise.all(Array.from({ length: SETTINGS.workers }, worker));
  const loadSeconds = (Date.now() - loadStarted) / 1000;
  const vacuumStarted = Date.now();
  // The partitions were vacuumed as they were written: the parent's statistics only.
  await seed('ANALYZE usage_records');
  for (const tableName of ['usage_daily_totals', 'wallet_transactions', 'api_key_spend']) await seed(`VACUUM (ANALYZE) ${tableName}`);
  const vacuumSeconds = (Date.now() - vacuumStarted) / 1000;
  log(
    `Loaded ${thousands(recordsDone)} records and ${thousands(ledgerDone)} ledger rows in ${round1(loadSeconds / 60)} min ` +
      `(${thousands(recordsDone / loadSeconds)} records/s with the ledger rows); then VACUUM (ANALYZE) of the rest ${round1(vacuumSeconds)} s`,
  );
  // Summed over the connections, and each part's share of that sum.
  const spentTotal = [...spentMs.values()].reduce((sum, ms) => sum + ms, 0);
  const spent = [...spentMs].map(([name, ms]) => ({ name, seconds: round1(ms / 1000), share: round1((100 * ms) / spentTotal) }));
  log(
    `Where the records' time went, summed over ${SETTINGS.workers} connection(s) (EXPLAIN ANALYZE of each day's statement): ` +
      spent.map((t) => `${t.name} ${t.seconds} s (${t.share}%)`).join(', '),
  );

  // --- Bytes and totals ---------------------------------------------------------------------
  const [sizes] = (await seed(
    // The partitions: the parent stores nothing.
    `SELECT count(*) AS tables, sum(pg_total_relation_size(c.oid)) AS total, sum(pg_relation_size(c.oid)) AS heap,
            sum(pg_indexes_size(c.oid)) AS indexes, sum(coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)) AS toast
       FROM pg_partition_tree('usage_records') AS t JOIN pg_class AS c ON c.oid = t.relid
      WHERE t.isleaf`,
  )) as Record<string, string>[];
  const [ledgerSize] = (await seed(
    `SELECT count(*) AS rows, pg_total_relation_size('wallet_transactions') AS total, pg_relation_size('wallet_transactions') AS heap,
            pg_indexes_size('wallet_transactions') AS indexes FROM wallet_transactions`,
  )) as Record<string, string>[];
  const [sums] = (await seed(
    `SELECT r.records, r.cost, r.tokens, r.largest, t.requests, t.cost AS totals_cost, t.tokens AS totals_tokens,
            (SELECT count(*) FROM usage_daily_totals) AS totals_rows
       FROM (SELECT count(*) AS records, sum(total_cost_millicents) AS cost, sum(total_tokens) AS tokens,
                    count(*) FILTER (WHERE workspace_id = $1) AS largest FROM usage_records) AS r,
            (SELECT sum(requests) AS requests, sum(cost_millicents) AS cost, sum(tokens) AS tokens FROM usage_daily_totals) AS t`,
    [workspaceId],
  )) as Record<string, string>[];
  const exact = sums.records === sums.requests && sums.cost === sums.totals_cost && sums.tokens === sums.totals_tokens;
  const records = Number(sums.records);
  const perRecord = (bytes: string) => round1(Number(bytes) / records);
  const perLedgerRow = (bytes: string) => round1(Number(bytes) / Number(ledgerSize.rows));
  const bytes = {
    usageRecord: { total: perRecord(sizes.total), heap: perRecord(sizes.heap), indexes: perRecord(sizes.indexes), toast: perRecord(sizes.toast) },
    ledgerRow: { total: perLedgerRow(ledgerSize.total), heap: perLedgerRow(ledgerSize.heap), indexes: perLedgerRow(ledgerSize.indexes) },
  };
  log(
    `usage_records: ${thousands(records)} records in ${sizes.tables} partitions, ${round2(Number(sizes.total) / 2 ** 30)} GiB; per record ` +
      `${bytes.usageRecord.total} bytes (heap ${bytes.usageRecord.heap}, indexes ${bytes.usageRecord.indexes}, TOAST ${bytes.usageRecord.toast}); ` +
      `the largest workspace ${thousands(Number(sums.largest))} (${round1((100 * Number(sums.largest)) / records)}%)`,
  );
  log(
    `wallet_transactions: ${thousands(Number(ledgerSize.rows))} rows, ${round2(Number(ledgerSize.total) / 2 ** 30)} GiB; per row ` +
      `${bytes.ledgerRow.total} bytes (heap ${bytes.ledgerRow.heap}, indexes ${bytes.ledgerRow.indexes})`,
  );
  log(
    `usage_daily_totals (${thousands(Number(sums.totals_rows))} rows) equals the records' count, cost and tokens: ` +
      (exact ? 'yes' : `NO (records ${sums.records}, ${sums.cost}, ${sums.tokens}; totals ${sums.requests}, ${sums.totals_cost}, ${sums.totals_tokens})`),
  );
  if (!exact) throw new Error('usage_daily_totals does not equal usage_records');

  // --- Pages -----------------------------------------------------------------------------
  const pageSize = 20;
  const [{ id: deepCursor }] = (await seed(
    `SELECT id FROM usage_records WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC OFFSET ${49 * pageSize - 1} LIMIT 1`,
    [workspaceId],
  )) as { id: string }[];
  const range90 = `start_date=${isoDay(firstDay)}&end_date=${isoDay(today)}`;
  const w = `/w/${workspaceId}`;
  const api = { authorization: `Bearer ${keys[0].apiKey}` };
  const pages: [string, string, string | Record<string, string>][] = [
    ['GET /v1/usage (30 days)', '/v1/usage', api],
    ['GET /v1/usage (90 days)', `/v1/usage?${range90}`, api],
    ['GET /v1/usage/recent, first page', '/v1/usage/recent', api],
    ['GET /v1/usage/recent, 50th page', `/v1/usage/recent?starting_after=${deepCursor}`, api],
    ['GET /v1/usage/recent?status=error', '/v1/usage/recent?status=error', api],
    ['GET /v1/usage/daily (30 days)', '/v1/usage/daily', api],
    ['GET /v1/usage/daily (90 days)', `/v1/usage/daily?${range90}`, api],
    ['dashboard usage (30 days)', `${w}/usage`, cookie],
    ['dashboard usage (90 days)', `${w}/usage?days=90`, cookie],
    ['dashboard requests', `${w}/usage/requests`, cookie],
    ['dashboard billing', `${w}/billing`, cookie],
  ];
  const results: { page: string; path: string; firstTtfb: number; ttfbP50: number; ttfbP95: number; ttfbMax: number; kb: number }[] = [];
  for (const [name, path, auth] of pages) {
    const first = await timedGet(`${baseUrl}${path}`, auth);
    if (first.status !== 200) throw new Error(`${name}: GET ${path} answered ${first.status}`);
    const ttfb: number[] = [];
    for (let i = 0; i < SETTINGS.repetitions; i += 1) {
      const sample = await timedGet(`${baseUrl}${path}`, auth);
      if (sample.status !== 200) throw new Error(`${name}: GET ${path} answered ${sample.status}`);
      ttfb.push(sample.ttfb);
    }
    const t = summarize(ttfb);
    results.push({
      page: name,
      path: path.replace(workspaceId, ':id').replace(deepCursor, ':cursor'),
      firstTtfb: round2(first.ttfb),
      ttfbP50: round2(t.p50),
      ttfbP95: round2(t.p95),
      ttfbMax: round2(t.max),
      kb: round2(first.bytes / 1024),
    });
  }
  log('');
  log(table(['page', 'first TTFB ms', 'TTFB p50 ms', 'TTFB p95 ms', 'TTFB max ms', 'KiB'], results.map((r) => [r.page, r.firstTtfb, r.ttfbP50, r.ttfbP95, r.ttfbMax, r.kb])));

  // --- Retention ---------------------------------------------------------------------------
  // The clock moved to the first moment the oldest day is out of the window (the window is whole UTC days).
  const purgeAt = new Date(firstDay + config.usageRetentionDays * DAY_MS);
  const oldestDay = [isoDay(firstDay), isoDay(firstDay + DAY_MS)];
  const countDay = async () =>
    (await seed(
      `SELECT (SELECT count(*) FROM usage_records
                 WHERE created_at >= $1::timestamp AT TIME ZONE 'UTC' AND created_at < $2::timestamp AT TIME ZONE 'UTC') AS records,
              (SELECT coalesce(sum(requests), 0) FROM usage_daily_totals WHERE day = $1::date) AS totals,
              (SELECT sum(requests) FROM usage_daily_totals) AS all_totals`,
      oldestDay,
    )) as { records: string; totals: string; all_totals: string }[];
  const [before] = await countDay();
  const retention = app.get(UsageRetention);
  const purgeStarted = process.hrtime.bigint();
  const purged = await retention.purgeExpired({ now: purgeAt });
  const purgeMs = Number(process.hrtime.bigint() - purgeStarted) / 1e6;
  const [after] = await countDay();
  const againStarted = process.hrtime.bigint();
  await retention.purgeExpired({ now: purgeAt });
  const againMs = Number(process.hrtime.bigint() - againStarted) / 1e6;
  const totalsKept = Number(after.all_totals) === Number(before.all_totals) - Number(before.records) && after.records === '0' && after.totals === '0';
  log(
    `\nRetention at ${purgeAt.toISOString()} (USAGE_RETENTION_DAYS=${config.usageRetentionDays}): removed the day ${oldestDay[0]} ` +
      `(${thousands(Number(before.records))} records, ${JSON.stringify(purged)}) in ${round1(purgeMs)} ms; a second run with nothing to remove ` +
      `${round1(againMs)} ms. The day's records left: ${after.records}; the other days' totals ${totalsKept ? 'unchanged (exact)' : 'CHANGED'}`,
  );
  await seeder.end();

  const over = results.filter((r) => r.ttfbP95 >= SETTINGS.targetTtfbMs);
  log(
    over.length === 0
      ? `\nEvery page's p95 time to first byte is under ${SETTINGS.targetTtfbMs} ms.`
      : `\nOver the ${SETTINGS.targetTtfbMs} ms target at p95: ${over.map((r) => r.page).join(', ')}`,
  );
  const file = await writeResults('data-scale', {
    settings: SETTINGS,
    load: { seconds: round1(loadSeconds), recordsPerSecond: Math.round(recordsDone / loadSeconds), vacuumSeconds: round1(vacuumSeconds), spent },
    records,
    largestWorkspaceRecords: Number(sums.largest),
    bytes,
    retention: { removedRecords: Number(before.records), ms: round1(purgeMs), emptyRunMs: round1(againMs), totalsKept },
    pages: results,
    loadAverage: os.loadavg(),
  });
  log(`Results: ${file}; wall time ${round1((Date.now() - startedAt) / 60_000)} min`);
  if (!totalsKept) throw new Error('Retention changed the totals of days it kept');
  return over.length === 0 ? 0 : 2;
}

runBench('data-scale', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
