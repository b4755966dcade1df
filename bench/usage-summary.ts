/**
 * Are the usage statistics fast on a big workspace?
 *
 * Starts its own embedded PostgreSQL in a temporary directory, migrates it, builds the real
 * app with createApp(), and fills usage_records with generate_series:
 *   - 1,000,000 records of one workspace, spread over the 90 days of the retention window
 *     (from 00:00 UTC of today - 89 days until now), 8 models, 1,000 end users, 2% errors;
 *   - 500,000 records of three other workspaces, interleaved in time (so the table's pages
 *     mix workspaces, as in production);
 *   - 100,000 records older than the retention window, for the purge.
 * Rows are inserted in created_at order, as the service writes them.
 *
 * Then, for the statements the service runs (imported from the service, not copied):
 * EXPLAIN (ANALYZE, BUFFERS) once, and timings of repeated runs, in SQL and over HTTP.
 * The target: the summary over the 1,000,000 records answers in under 200 ms.
 * For comparison, the same summary computed from the records themselves (what the
 * usage_daily_totals rollup saves), and the cost the rollup's trigger adds to each insert.
 *
 *   npm run -s build && node dist/bench/usage-summary.js
 */
import 'reflect-metadata';
import * as os from 'node:os';
import type { DataSource } from 'typeorm';
import { type BenchContext, coverUsageDays, runBench, summarize, table } from './harness';

const SETTINGS = {
  targetRecords: 1_000_000,
  noiseRecords: 500_000,
  noiseWorkspaces: 3,
  /** Plus one small workspace of 1,000 records (another 1,000 rows). */
  expiredRecords: 100_000,
  days: 90,
  /** Timed repetitions of each statement, after one untimed warm-up run. */
  repetitions: 15,
  hardTimeoutMs: 900_000,
} as const;

const TARGET_SUMMARY_MS = 200;

const MODELS = [
  ['gpt-4o', 250_000, 1_000_000, 10],
  ['gpt-4o-mini', 15_000, 60_000, 30],
  ['gpt-4-turbo', 1_000_000, 3_000_000, 3],
  ['o4-mini', 110_000, 440_000, 10],
  ['claude-sonnet-4-6', 300_000, 1_500_000, 12],
  ['claude-haiku-4-5', 100_000, 500_000, 15],
  ['gemini-2.5-pro', 125_000, 1_000_000, 8],
  ['gemini-2.5-flash', 30_000, 250_000, 12],
] as const;

/** The summary as it would be without usage_daily_totals: every record of the range, from the table. */
const RAW_SUMMARY_SQL = `
  SELECT model,
         count(*) AS requests,
         sum(total_cost_millicents) AS cost,
         sum(count(*)) OVER () AS total_requests,
         sum(sum(total_tokens)) OVER () AS total_tokens,
         sum(sum(total_cost_millicents)) OVER () AS total_cost,
         round(sum(sum(latency_ms)) OVER () / sum(count(*)) OVER (), 2) AS average_latency
    FROM usage_records
   WHERE workspace_id = $1 AND created_at >= $2 AND created_at < $3
   GROUP BY model
   ORDER BY cost DESC, requests DESC, model`;

const round1 = (v: number) => Math.round(v * 10) / 10;
const round2 = (v: number) => Math.round(v * 100) / 100;

type Stats = ReturnType<typeof stats>;

function stats(samples: number[]) {
  const s = summarize(samples);
  return { n: s.n, min: round2(s.min), median: round2(s.p50), p90: round2(s.p90), max: round2(s.max) };
}

async function time(fn: () => Promise<unknown>): Promise<number> {
  const started = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - started) / 1e6;
}

async function repeat(fn: () => Promise<unknown>, repetitions: number = SETTINGS.repetitions): Promise<Stats> {
  await fn(); // warm-up, not counted
  const samples: number[] = [];
  for (let i = 0; i < repetitions; i += 1) samples.push(await time(fn));
  return stats(samples);
}

/** A rows-of-one-workspace generator: `count` rows from `fromSql` to `untilSql`, evenly spaced in time, in order. */
function insertSql(workspaceIds: string[], count: number, fromSql: string, untilSql: string, seed: number): string {
  // A model per row by weight, from a deterministic hash of the row number.
  const totalWeight = MODELS.reduce((sum, m) => sum + m[3], 0);
  let cumulative = 0;
  const modelCase = MODELS.map(([id, , , weight]) => {
    cumulative += weight;
    return `WHEN h.m < ${cumulative} THEN '${id}'`;
  }).join(' ');
  const priceCase = (index: 1 | 2) =>
    MODELS.map((m) => `WHEN '${m[0]}' THEN ${m[index]}::numeric`).join(' ');
  const ws = `(ARRAY[${workspaceIds.map((id) => `'${id}'::uuid`).join(', ')}])[1 + (g % ${workspaceIds.length})]`;
  return `
    INSERT INTO usage_records (workspace_id, request_id, model, input_tokens, output_tokens, total_tokens,
                               llm_cost_millicents, tool_cost_millicents, total_cost_millicents, charged_millicents,
                               latency_ms, status, error_code, user_id, tools_used, created_at)
    SELECT ws, 'req_' || g, model, input_tokens, output_tokens, input_tokens + output_tokens,
           round(cost, 6), 0, round(cost, 6), ceil(cost),
           latency_ms, CASE WHEN failed THEN 'error' ELSE 'success' END, CASE WHEN failed THEN 'upstream_error' END,
           'user-' || (g % 1000), '{}', created_at
      FROM (
        SELECT g, ws, model, failed, latency_ms, created_at,
               CASE WHEN failed THEN 0 ELSE input_tokens END AS input_tokens,
               CASE WHEN failed THEN 0 ELSE output_tokens END AS output_tokens,
               CASE WHEN failed THEN 0
                    ELSE (input_tokens * (CASE model ${priceCase(1)} END) + output_tokens * (CASE model ${priceCase(2)} END)) / 1000000
               END AS cost
          FROM (
            SELECT g, ${ws} AS ws,
                   CASE ${modelCase} END AS model,
                   (h.r % 50) = 0 AS failed,
                   50 + (h.r % 4000) AS input_tokens,
                   10 + ((h.r / 7) % 1500) AS output_tokens,
                   200 + ((h.r / 13) % 6000) AS latency_ms,
                   ${fromSql} + (${untilSql} - ${fromSql}) * (g::double precision / ${count}) AS created_at
              FROM generate_series(0, ${count - 1}) AS g,
                   LATERAL (SELECT abs(hashint4(g + ${seed})) AS r, abs(hashint4(g + ${seed})) % ${totalWeight} AS m) AS h
          ) AS base
      ) AS priced
     ORDER BY created_at`;
}

async function explain(dataSource: DataSource, sql: string, parameters: unknown[]): Promise<{ plan: string; executionMs: number }> {
  const rows = (await dataSource.query(`EXPLAIN (ANALYZE, BUFFERS) ${sql}`, parameters)) as { 'QUERY PLAN': string }[];
  const plan = rows.map((row) => row['QUERY PLAN']).join('\n');
  const match = /Execution Time: ([\d.]+) ms/.exec(plan);
  return { plan, executionMs: match ? Number(match[1]) : NaN };
}

async function main({ log, startApp, startedAt }: BenchContext): Promise<number> {
  const { WorkspacesService } = await import('../src/workspaces/workspaces.service');
  const { DAILY_SQL, SUMMARY_SQL, recentSql, UsageStatsService } = await import('../src/usage/usage-stats.service');
  const { UsageRetention } = await import('../src/usage/usage-retention');
  const { DataSource: DataSourceClass } = await import('typeorm');

  log(`Machine: ${os.cpus().length} CPUs (${os.cpus()[0]?.model}), Node ${process.version}, 1-min load ${round1(os.loadavg()[0])}`);
  const { app, config, baseUrl } = await startApp();
  const dataSource = app.get(DataSourceClass);
  const settings = (await dataSource.query(
    `SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers', 'work_mem', 'max_parallel_workers_per_gather', 'jit', 'server_version')`,
  )) as { name: string; setting: string }[];
  log(`PostgreSQL ${settings.find((s) => s.name === 'server_version')?.setting}; ${settings.map((s) => `${s.name}=${s.setting}`).join(', ')}`);

  const workspaces = app.get(WorkspacesService);
  const target = await workspaces.create({ name: 'Big workspace', tier: 'enterprise' });
  await workspaces.setTier(target.workspace.id, 'enterprise', -1);
  const noise: string[] = [];
  for (let i = 0; i < SETTINGS.noiseWorkspaces; i += 1) noise.push((await workspaces.create({ name: `Noise ${i}`, tier: 'pro' })).workspace.id);
  const small = await workspaces.create({ name: 'Small workspace', tier: 'pro' });

  // --- Data ------------------------------------------------------------------------------
  await coverUsageDays(dataSource, 101);
  const windowStart = `(date_trunc('day', now() AT TIME ZONE 'UTC') - interval '${SETTINGS.days - 1} days') AT TIME ZONE 'UTC'`;
  const inserted = await time(async () => {
    await dataSource.query(insertSql(noise, SETTINGS.expiredRecords, `now() - interval '100 days'`, `now() - interval '91 days'`, 7));
    // Target and noise interleaved in time: one statement per source, then the table is in time order per source.
    await dataSource.query(`
      CREATE TEMP TABLE staged (LIKE usage_records INCLUDING DEFAULTS)`);
    await dataSource.query(
      insertSql([target.workspace.id], SETTINGS.targetRecords, windowStart, 'now()', 1).replace('INSERT INTO usage_records', 'INSERT INTO staged'),
    );
    await dataSource.query(
      insertSql(noise, SETTINGS.noiseRecords, windowStart, 'now()', 2).replace('INSERT INTO usage_records', 'INSERT INTO staged'),
    );
    await dataSource.query(
      insertSql([small.workspace.id], 1_000, windowStart, 'now()', 3).replace('INSERT INTO usage_records', 'INSERT INTO staged'),
    );
    await dataSource.query('INSERT INTO usage_records SELECT * FROM staged ORDER BY created_at');
    await dataSource.query('DROP TABLE staged');
  });
  const vacuumed = await time(() => dataSource.query('VACUUM (ANALYZE) usage_records'));
  await dataSource.query('VACUUM (ANALYZE) usage_daily_totals');
  const [counts] = (await dataSource.query(
    `SELECT count(*) FILTER (WHERE workspace_id = $1) AS target, count(*) AS total,
            pg_size_pretty(pg_table_size('usage_records')) AS table_size,
            (SELECT count(*) FROM usage_daily_totals) AS rollup_rows,
            (SELECT count(*) FROM usage_daily_totals WHERE workspace_id = $1) AS rollup_rows_target,
            pg_size_pretty(pg_total_relation_size('usage_daily_totals')) AS rollup_size
       FROM usage_records`,
    [target.workspace.id],
  )) as Record<string, string>[];
  const indexes = (await dataSource.query(
    `SELECT indexrelname AS name, pg_size_pretty(pg_relation_size(indexrelid)) AS size
       FROM pg_stat_user_indexes WHERE relname = 'usage_records' ORDER BY indexrelname`,
  )) as { name: string; size: string }[];
  log(
    `Inserted ${counts.total} records (${counts.target} of the big workspace) in ${round1(inserted / 1000)} s, VACUUM ANALYZE ${round1(vacuumed / 1000)} s; ` +
      `table ${counts.table_size}; usage_daily_totals: ${counts.rollup_rows} rows (${counts.rollup_rows_target} of the big workspace), ${counts.rollup_size}`,
  );
  log(`Indexes of usage_records: ${indexes.map((i) => `${i.name} ${i.size}`).join(', ')}`);
  const [{ mismatches }] = (await dataSource.query(
    `SELECT count(*)::int AS mismatches FROM (
       SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model, coalesce(provider, '') AS provider,
              coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id, count(*) AS requests,
              sum(total_tokens) AS tokens, sum(total_cost_millicents) AS cost_millicents, sum(latency_ms) AS latency_ms
         FROM usage_records GROUP BY 1, 2, 3, 4, 5
     ) AS r FULL JOIN usage_daily_totals AS t USING (workspace_id, day, model, provider, api_key_id)
      WHERE r.requests IS DISTINCT FROM t.requests OR r.tokens IS DISTINCT FROM t.tokens
         OR r.cost_millicents IS DISTINCT FROM t.cost_millicents OR r.latency_ms IS DISTINCT FROM t.latency_ms`,
  )) as { mismatches: number }[];
  log(`usage_daily_totals equals the aggregate of usage_records: ${mismatches === 0 ? 'yes' : `NO, ${mismatches} rows differ`}`);
  if (mismatches !== 0) throw new Error('usage_daily_totals disagrees with usage_records');

  // --- The statements --------------------------------------------------------------------
  const usageStats = app.get(UsageStatsService);
  const defaultPeriod = usageStats.period({});
  const fullPeriod = usageStats.period({ start_date: dayBefore(defaultPeriod.endDate, SETTINGS.days - 1), end_date: defaultPeriod.endDate });
  const id = target.workspace.id;
  const [{ in_range: inFullRange }] = (await dataSource.query(
    'SELECT count(*)::int AS in_range FROM usage_records WHERE workspace_id = $1 AND created_at >= $2 AND created_at < $3',
    [id, fullPeriod.from, fullPeriod.until],
  )) as { in_range: number }[];
  log(`Full range ${fullPeriod.startDate}..${fullPeriod.endDate}: ${inFullRange} records of the big workspace; default range ${defaultPeriod.startDate}..${defaultPeriod.endDate}`);

  const pageRows = (await dataSource.query(recentSql(id, { limit: 100 }).sql, recentSql(id, { limit: 100 }).parameters)) as { id: string }[];
  const cursor = pageRows[pageRows.length - 1].id;

  const cases: { name: string; sql: string; parameters: unknown[]; http?: string }[] = [
    { name: 'summary, 90 days (1M records)', sql: SUMMARY_SQL, parameters: [id, fullPeriod.startDate, fullPeriod.endDate, null], http: `/v1/usage?start_date=${fullPeriod.startDate}&end_date=${fullPeriod.endDate}` },
    { name: 'summary, default 30 days', sql: SUMMARY_SQL, parameters: [id, defaultPeriod.startDate, defaultPeriod.endDate, null], http: '/v1/usage' },
    { name: 'daily, 90 days (1M records)', sql: DAILY_SQL, parameters: [id, fullPeriod.startDate, fullPeriod.endDate, null], http: `/v1/usage/daily?start_date=${fullPeriod.startDate}&end_date=${fullPeriod.endDate}` },
    { name: 'recent, first page', ...recentSql(id, { limit: 20 }), http: '/v1/usage/recent' },
    { name: 'recent, page after a cursor', ...recentSql(id, { limit: 20, startingAfter: cursor }), http: `/v1/usage/recent?starting_after=${cursor}` },
    { name: 'recent, status=error (2%)', ...recentSql(id, { limit: 20, status: 'error' }), http: '/v1/usage/recent?status=error' },
    { name: 'recent, user_id (0.1%)', ...recentSql(id, { limit: 20, userId: 'user-42' }), http: '/v1/usage/recent?user_id=user-42' },
    { name: 'recent, model=gpt-4-turbo (3%)', ...recentSql(id, { limit: 20, model: 'gpt-4-turbo' }), http: '/v1/usage/recent?model=gpt-4-turbo' },
    { name: 'recent, user_id without records', ...recentSql(id, { limit: 20, userId: 'nobody' }), http: '/v1/usage/recent?user_id=nobody' },
    { name: 'recent, model without records', ...recentSql(id, { limit: 20, model: 'no-such-model' }), http: '/v1/usage/recent?model=no-such-model' },
    { name: 'small workspace: summary, 90 days', sql: SUMMARY_SQL, parameters: [small.workspace.id, fullPeriod.startDate, fullPeriod.endDate, null] },
    { name: 'small workspace: recent, first page', ...recentSql(small.workspace.id, { limit: 20 }) },
    { name: 'small workspace: recent, status=error', ...recentSql(small.workspace.id, { limit: 20, status: 'error' }) },
  ];

  const headers = { authorization: `Bearer ${target.apiKey}` };
  const results: Record<string, unknown>[] = [];
  for (const c of cases) {
    const explained = await explain(dataSource, c.sql, c.parameters);
    log(`\n=== ${c.name} ===\n${explained.plan}`);
    const sqlTimes = await repeat(() => dataSource.query(c.sql, c.parameters));
    let httpTimes: Stats | undefined;
    if (c.http) {
      const url = `${baseUrl}${c.http}`;
      httpTimes = await repeat(async () => {
        const res = await fetch(url, { headers });
        if (res.status !== 200) throw new Error(`${c.http}: HTTP ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
      });
    }
    results.push({ name: c.name, explainMs: explained.executionMs, sql: sqlTimes, http: httpTimes });
  }

  // --- For comparison: the same summary from the records themselves (no rollup) ------------
  const rawSummary = { sql: RAW_SUMMARY_SQL, parameters: [id, fullPeriod.from, fullPeriod.until] };
  const rawExplained = await explain(dataSource, rawSummary.sql, rawSummary.parameters);
  log(`\n=== for comparison: summary, 90 days, aggregated from usage_records (no rollup) ===\n${rawExplained.plan}`);
  const rawTimes = await repeat(() => dataSource.query(rawSummary.sql, rawSummary.parameters), 5);
  const [fromRollup, fromRecords] = [
    await dataSource.query(SUMMARY_SQL, [id, fullPeriod.startDate, fullPeriod.endDate, null]),
    await dataSource.query(RAW_SUMMARY_SQL, rawSummary.parameters),
  ];
  if (JSON.stringify(fromRollup) !== JSON.stringify(fromRecords)) {
    throw new Error(`The rollup's summary differs from the records':\n${JSON.stringify(fromRollup)}\n${JSON.stringify(fromRecords)}`);
  }
  log('The summary from usage_daily_totals is identical to the one aggregated from usage_records.');

  // --- What the rollup's trigger costs each insert ----------------------------------------
  const writes = await workspaces.create({ name: 'Writes', tier: 'pro' });
  const insertOne = `INSERT INTO usage_records (workspace_id, request_id, model, input_tokens, output_tokens, total_tokens,
      llm_cost_millicents, tool_cost_millicents, total_cost_millicents, latency_ms, status)
    VALUES ($1, 'req_w', 'gpt-4o', 1000, 200, 1200, 450.125, 0, 450.125, 900, 'success')`;
  const writer = dataSource.createQueryRunner();
  await writer.connect();
  let insertWith: Stats;
  let insertWithout: Stats;
  try {
    insertWith = await repeat(() => writer.query(insertOne, [writes.workspace.id]), 2_000);
    await writer.query('ALTER TABLE usage_records DISABLE TRIGGER USER');
    try {
      insertWithout = await repeat(() => writer.query(insertOne, [writes.workspace.id]), 2_000);
      // Take out what was written without the trigger, still without it, so the rollup stays exact.
      await writer.query(`DELETE FROM usage_records WHERE workspace_id = $1 AND id NOT IN (
        SELECT id FROM usage_records WHERE workspace_id = $1 ORDER BY created_at LIMIT 2001)`, [writes.workspace.id]);
    } finally {
      await writer.query('ALTER TABLE usage_records ENABLE TRIGGER USER');
    }
  } finally {
    await writer.release();
  }

  // --- Retention ---------------------------------------------------------------------------
  const purge = app.get(UsageRetention);
  let purged = { deleted: 0 };
  const purgeMs = await time(async () => {
    purged = await purge.purgeExpired();
  });
  const [{ left }] = (await dataSource.query(
    `SELECT count(*)::int AS left FROM usage_records WHERE created_at < now() - make_interval(days => $1)`,
    [config.usageRetentionDays],
  )) as { left: number }[];
  const secondPurgeMs = await time(() => purge.purgeExpired());

  // --- Report ------------------------------------------------------------------------------
  log('\n=== Timings (ms): EXPLAIN ANALYZE execution time once; then median/p90/max of 15 runs in SQL (pg round trip) and over HTTP ===');
  log(
    table(
      ['statement', 'explain', 'sql median', 'sql p90', 'sql max', 'http median', 'http p90', 'http max'],
      [
        ...results.map((r) => {
          const sql = r.sql as Stats;
          const http = r.http as Stats | undefined;
          return [r.name, r.explainMs, sql.median, sql.p90, sql.max, http?.median ?? '-', http?.p90 ?? '-', http?.max ?? '-'];
        }),
        ['for comparison: summary from usage_records', rawExplained.executionMs, rawTimes.median, rawTimes.p90, rawTimes.max, '-', '-', '-'],
      ],
    ),
  );
  log(
    `\nOne INSERT into usage_records (autocommit, 2,000 runs): median ${insertWith.median} ms, p90 ${insertWith.p90} ms with the rollup trigger; ` +
      `median ${insertWithout.median} ms, p90 ${insertWithout.p90} ms without`,
  );
  log(
    `Retention: purged ${purged.deleted} expired records in ${round1(purgeMs)} ms (batches of 10,000); ${left} expired left; ` +
      `a second run with nothing to delete took ${round1(secondPurgeMs)} ms`,
  );
  const summary = results[0].sql as Stats;
  const met = summary.median < TARGET_SUMMARY_MS && (results[0].http as Stats).median < TARGET_SUMMARY_MS;
  log(
    `Target: summary over ${inFullRange} records of one workspace under ${TARGET_SUMMARY_MS} ms -> SQL median ${summary.median} ms, ` +
      `HTTP median ${(results[0].http as Stats).median} ms: ${met ? 'MET' : 'NOT MET'}`,
  );
  log(`Load average at the end: ${os.loadavg().map(round1).join(' ')}; wall time ${round1((Date.now() - startedAt) / 1000)} s`);
  return met ? 0 : 2;
}

function dayBefore(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) - days * 86_400_000).toISOString().slice(0, 10);
}

runBench('usage-summary', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
