/**
 * Do the dashboard's usage, billing and conversations pages stay fast on a big workspace?
 *
 * Starts its own embedded PostgreSQL (bench/harness.ts), the real app, signs a person up
 * through the pages (their workspace is the one measured), and fills it with generate_series:
 *   - 1,000,000 usage records over the 90 days of the retention window, 8 models, 1,000 end
 *     users, 2% errors, one record in five by one of two assistants;
 *   - 200,000 ledger rows (the usage charges of a busy wallet);
 *   - 20,000 conversations of 10 messages each: 200,000 messages of 12 words.
 * Then it times each page over HTTP with the session cookie, as a browser asks for it:
 * time to first byte (the page is rendered whole before its first byte is sent, so TTFB is
 * the server's time) and the time to the last byte, after one untimed warm-up.
 *
 *   npm run -s build && node dist/bench/dashboard-pages.js
 */
import 'reflect-metadata';
import * as os from 'node:os';
import { type BenchContext, MESSAGE_WORDS as WORDS, coverUsageDays, runBench, signUp, summarize, table, timedGet, writeResults } from './harness';

const SETTINGS = {
  usageRecords: 1_000_000,
  ledgerRows: 200_000,
  conversations: 20_000,
  messagesPerConversation: 10,
  days: 90,
  /** Timed requests per page, after one untimed warm-up. */
  repetitions: 30,
  hardTimeoutMs: 1_200_000,
} as const;

const MODELS = ['gpt-4o', 'gpt-4o-mini', 'gpt-4-turbo', 'o4-mini', 'claude-sonnet-4-6', 'claude-haiku-4-5', 'gemini-2.5-pro', 'gemini-2.5-flash'];

const round2 = (v: number) => Math.round(v * 100) / 100;

async function main({ log, startApp }: BenchContext): Promise<number> {
  const { DataSource } = await import('typeorm');
  const { AssistantsService } = await import('../src/assistants/assistants.service');
  const { WorkspacesService } = await import('../src/workspaces/workspaces.service');

  log(`Machine: ${os.cpus().length} CPUs (${os.cpus()[0]?.model}), Node ${process.version}, 1-min load ${round2(os.loadavg()[0])}`);
  const { app, baseUrl } = await startApp();
  const db = app.get(DataSource);
  const { cookie, workspaceId } = await signUp(baseUrl, 'bench@example.com', 'Bench Person');
  await app.get(WorkspacesService).setTier(workspaceId, 'enterprise');
  const assistants = [
    (await app.get(AssistantsService).create(workspaceId, { name: 'Support', model: 'gpt-4o-mini' })).id,
    (await app.get(AssistantsService).create(workspaceId, { name: 'Sales', model: 'gpt-4o' })).id,
  ];

  // --- Data ------------------------------------------------------------------------------
  const seedStarted = Date.now();
  await coverUsageDays(db, SETTINGS.days);
  const windowStart = `((date_trunc('day', now() AT TIME ZONE 'UTC') - interval '${SETTINGS.days - 1} days') AT TIME ZONE 'UTC')`;
  const n = SETTINGS.usageRecords;
  await db.query(
    `INSERT INTO usage_records (workspace_id, request_id, assistant_id, model, input_tokens, output_tokens, total_tokens,
                                llm_cost_millicents, tool_cost_millicents, total_cost_millicents, charged_millicents, latency_ms,
                                status, error_code, user_id, tools_used, created_at)
     SELECT $1, 'req_' || g,
            CASE WHEN g % 5 = 0 THEN ($2::uuid[])[1 + (g / 5) % 2] END,
            ($3::text[])[1 + r % 8],
            50 + r % 4000, 10 + (r / 7) % 1500, 60 + r % 4000 + (r / 7) % 1500,
            round((50 + r % 4000) * 0.25 + (10 + (r / 7) % 1500) * 1.0, 6), 0,
            round((50 + r % 4000) * 0.25 + (10 + (r / 7) % 1500) * 1.0, 6),
            ceil((50 + r % 4000) * 0.25 + (10 + (r / 7) % 1500) * 1.0),
            200 + (r / 13) % 6000,
            CASE WHEN r % 50 = 0 THEN 'error' ELSE 'success' END, CASE WHEN r % 50 = 0 THEN 'upstream_error' END,
            'user-' || (g % 1000), '{}',
            ${windowStart} + (now() - ${windowStart}) * (g::double precision / ${n})
       FROM generate_series(0, ${n - 1}) AS g, LATERAL (SELECT abs(hashint4(g)) AS r) AS h
      ORDER BY g`,
    [workspaceId, assistants, MODELS],
  );
  const rows = SETTINGS.ledgerRows;
  await db.query(
    `INSERT INTO wallet_transactions (workspace_id, type, amount_millicents, balance_after_millicents, description, idempotency_key, created_at)
     SELECT $1, CASE WHEN g % 1000 = 0 THEN 'topup' ELSE 'usage' END,
            CASE WHEN g % 1000 = 0 THEN 10000000 ELSE -(100 + g % 5000) END,
            1000000000 - g, 'API usage: ' || ($2::text[])[1 + g % 8], 'bench:' || g,
            ${windowStart} + (now() - ${windowStart}) * (g::double precision / ${rows})
       FROM generate_series(1, ${rows}) AS g`,
    [workspaceId, MODELS],
  );
  const c = SETTINGS.conversations;
  const perConversation = SETTINGS.messagesPerConversation;
  await db.query(
    `INSERT INTO conversations (id, workspace_id, assistant_id, title, message_count, created_at, last_message_at)
     SELECT md5('conversation' || g)::uuid, $1, ($2::uuid[])[1 + g % 2], 'Conversation ' || g || ' about ' || ($3::text[])[1 + g % ${WORDS.length}],
            ${perConversation}, ${windowStart} + (now() - ${windowStart}) * (g::double precision / ${c}),
            ${windowStart} + (now() - ${windowStart}) * (g::double precision / ${c}) + interval '5 minutes'
       FROM generate_series(1, ${c}) AS g`,
    [workspaceId, assistants, WORDS],
  );
  await db.query(
    `INSERT INTO conversation_messages (conversation_id, workspace_id, position, role, content, tokens, created_at)
     SELECT md5('conversation' || c)::uuid, $1, p, CASE WHEN p % 2 = 1 THEN 'user' ELSE 'assistant' END,
            (SELECT string_agg(($2::text[])[1 + abs(hashint4(c * 100 + p * 16 + k)) % ${WORDS.length}], ' ')
               FROM generate_series(1, 12) AS k),
            20, ${windowStart} + (now() - ${windowStart}) * (c::double precision / ${c}) + make_interval(secs => p)
       FROM generate_series(1, ${c}) AS c, generate_series(1, ${perConversation}) AS p`,
    [workspaceId, WORDS],
  );
  await db.query('UPDATE wallets SET balance_millicents = 1000000000 - $2 WHERE workspace_id = $1', [workspaceId, rows]);
  for (const tableName of ['usage_records', 'usage_daily_totals', 'wallet_transactions', 'conversations', 'conversation_messages']) {
    await db.query(`VACUUM (ANALYZE) ${tableName}`);
  }
  const [counts] = (await db.query(
    `SELECT (SELECT count(*) FROM usage_records WHERE workspace_id = $1) AS usage,
            (SELECT count(*) FROM wallet_transactions WHERE workspace_id = $1) AS ledger,
            (SELECT count(*) FROM conversations WHERE workspace_id = $1) AS conversations,
            (SELECT count(*) FROM conversation_messages WHERE workspace_id = $1) AS messages`,
    [workspaceId],
  )) as Record<string, string>[];
  log(
    `Seeded in ${round2((Date.now() - seedStarted) / 1000)} s: ${counts.usage} usage records, ${counts.ledger} ledger rows, ` +
      `${counts.conversations} conversations, ${counts.messages} messages`,
  );

  // --- Pages -----------------------------------------------------------------------------
  const w = `/w/${workspaceId}`;
  const today = new Date().toISOString().slice(0, 10);
  const tenDaysAgo = new Date(Date.now() - 10 * 86_400_000).toISOString().slice(0, 10);
  const [{ id: cursor }] = (await db.query(
    `SELECT id FROM usage_records WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC OFFSET 49 LIMIT 1`,
    [workspaceId],
  )) as { id: string }[];
  const pages: [string, string][] = [
    ['usage, 7 days', `${w}/usage?days=7`],
    ['usage, 30 days', `${w}/usage`],
    ['usage, 90 days', `${w}/usage?days=90`],
    ['requests, no filter', `${w}/usage/requests`],
    ['requests, page 2', `${w}/usage/requests?after=${cursor}`],
    ['requests, model', `${w}/usage/requests?model=gpt-4-turbo`],
    ['requests, assistant', `${w}/usage/requests?assistant=${assistants[1]}`],
    ['requests, status=error', `${w}/usage/requests?status=error`],
    ['requests, user id', `${w}/usage/requests?user=user-42`],
    ['requests, one day 10 days ago', `${w}/usage/requests?from=${tenDaysAgo}&to=${tenDaysAgo}`],
    ['requests, model+status+user', `${w}/usage/requests?model=gpt-4o&status=error&user=user-100`],
    ['billing', `${w}/billing`],
    ['billing, type=topup', `${w}/billing?type=topup`],
    ['billing, 10 days ago to today', `${w}/billing?from=${tenDaysAgo}&to=${today}`],
    ['conversations list', `${w}/conversations`],
    ['conversations search "refund"', `${w}/conversations?q=refund`],
    ['conversations search "damaged battery"', `${w}/conversations?q=${encodeURIComponent('"damaged battery"')}`],
  ];
  const results: Record<string, unknown>[] = [];
  for (const [name, path] of pages) {
    const warm = await timedGet(`${baseUrl}${path}`, cookie);
    if (warm.status !== 200) throw new Error(`${name}: GET ${path} answered ${warm.status}`);
    const ttfb: number[] = [];
    const total: number[] = [];
    for (let i = 0; i < SETTINGS.repetitions; i += 1) {
      const sample = await timedGet(`${baseUrl}${path}`, cookie);
      ttfb.push(sample.ttfb);
      total.push(sample.total);
    }
    const t = summarize(ttfb);
    const all = summarize(total);
    results.push({ page: name, path: path.replace(workspaceId, ':id'), ttfbP50: round2(t.p50), ttfbP95: round2(t.p95), totalP50: round2(all.p50), kb: round2(warm.bytes / 1024) });
  }
  log('');
  log(
    table(
      ['page', 'TTFB p50 ms', 'TTFB p95 ms', 'total p50 ms', 'KiB'],
      results.map((r) => [r.page, r.ttfbP50, r.ttfbP95, r.totalP50, r.kb]),
    ),
  );
  const file = await writeResults('dashboard-pages', { settings: SETTINGS, pages: results });
  log(`\nResults: ${file}`);
  return 0;
}

runBench('dashboard-pages', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
