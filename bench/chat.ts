/**
 * Throughput and added latency of the chat path, with full accounting, against Portkey's
 * open-source gateway as the peer (issue 11), and of the Anthropic Messages API on the same
 * core beside it (issue 41). See bench/README.md.
 *
 *   npm run bench:chat
 *
 * Every server is its own process on 127.0.0.1: a fake OpenAI-compatible upstream
 * (bench/chat-upstream.ts), Portkey's gateway in front of it, and the service as
 * production runs it (`node dist/src/main.js`, NODE_ENV=production) on the harness's
 * embedded PostgreSQL, configured with OPENAI_BASE_URL = the fake. The load generators run
 * on worker threads of this process (bench/chat-load.ts). After each measurement of the
 * service the database is checked: nothing left reserved, every wallet equal to the sum of
 * its ledger, one usage record per answered request.
 *
 * Exit code: 0 when every target is met, 2 when one is missed (printed), 1 on an error.
 */
import 'reflect-metadata';
import * as os from 'node:os';
import { saturate, type SaturatedRun, type Target } from './chat-load';
import { cpuDuring, type ServerProcess } from './chat-processes';
import {
  addedLatency,
  gatewayResults,
  judgeAgainstPortkey,
  missedChecks,
  reportGatewayRun,
  type Row,
  round1,
  round3,
  saturatedRow,
  startGatewayRig,
  TUNABLES,
} from './gateway-rig';
import { type BenchContext, closeApp, runBench, table, writeResults } from './harness';

// ---------------------------------------------------------------------------------------
// Settings: one place, recorded in the JSON output.
// ---------------------------------------------------------------------------------------
const SETTINGS = {
  model: 'gpt-4o-mini',
  connections: 32,
  warmupSeconds: 3,
  durationSeconds: 10,
  openLoop: { ratePerSecond: 200, warmupSeconds: 2, durationSeconds: 10, timeoutMs: 30_000 },
  manyWorkspaces: 200,
  /** 10^12 millicents ($10,000,000) per workspace: the run never runs out. */
  balanceMillicents: 1_000_000_000_000,
  /** Counted on every request, never reached. */
  customRateLimitRpm: 100_000_000,
  /** After a measurement of the service: how long the wallets may take to settle. */
  settleGraceMs: 10_000,
  /** About 5 min when the service keeps up; an overloaded one makes the fixed-rate runs wait up to 30 s each for their answers. */
  hardTimeoutMs: 540_000,
} as const;

const TARGETS = {
  /** Service non-streaming req/s, at least this times Portkey's in the same run. */
  throughputVsPortkey: 1.5,
  addedP50Ms: 2,
  addedP99Ms: 10,
  /** The Anthropic Messages API's req/s, at least this times chat completions' in the same run (plain and streamed). */
  messagesVsChat: 0.9,
} as const;

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';
/** The rows the targets are judged on. */
const PORTKEY_ROW = 'Portkey gateway 1.15 (no accounting)';
const PORTKEY_AGAIN_ROW = 'Portkey gateway 1.15, again';
const SERVICE_ROW = 'service, non-streaming';
const BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 });
const STREAM_BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16, stream: true });
/** The same request in the Anthropic Messages API's shape, as the Anthropic SDK sends it (translated onto the same upstream). */
const MESSAGES_BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 });
const MESSAGES_STREAM_BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16, stream: true });
const SERVICE_STREAM_ROW = 'service, streaming';
const MESSAGES_ROW = 'service, /v1/messages non-streaming';
const MESSAGES_STREAM_ROW = 'service, /v1/messages streaming';

// ---------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------
async function main(ctx: BenchContext): Promise<number> {
  const { databaseUrl, log, startedAt, startLoad } = ctx;
  log(`1-min load average at start: ${startLoad[0]} on ${os.cpus().length} CPUs`);
  const rig = await startGatewayRig(ctx, { name: 'chat', settings: SETTINGS, portkeyProbe: { path: CHAT, body: BODY } });
  const { upstreamUrl, portkey, portkeyUrl, portkeyHeaders, serviceEnv, workspaceId, apiKey, db, checks, startService, saturated, fixedRate, measureService, cannonCounts, openCounts, cpuGroups } = rig;
  // The 200 of the many-workspaces run in-process (two CLI starts each would take minutes), through the same service.
  const many = await createWorkspaces(databaseUrl, SETTINGS.manyWorkspaces);
  log(`Workspaces: 1 by the CLI, ${many.length} in-process; enterprise, ${SETTINGS.customRateLimitRpm} rpm, ${SETTINGS.balanceMillicents} millicents each`);

  // --- The service, as production runs it --------------------------------------------
  const serviceA = await startService('service A');
  const serviceTarget = (baseUrl: string, key: string, body = BODY): Target => ({ baseUrl, path: CHAT, headers: { authorization: `Bearer ${key}` }, body });
  const messagesTarget = (baseUrl: string, key: string, body = MESSAGES_BODY): Target => ({
    baseUrl,
    path: MESSAGES,
    headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    body,
  });
  await probeService(serviceA.baseUrl, apiKey);
  log(`Service on ${serviceA.baseUrl} (pid ${serviceA.server.pid}, NODE_ENV=production); a chat answer and a stream answer 200 (${Date.now() - startedAt} ms)`);

  const rows: Row[] = [];
  const addRow = async (target: string, run: SaturatedRun, services: ServerProcess[] = []) => void rows.push(await saturatedRow(target, run, services));

  // 1-2. The floor and the peer, saturated.
  const floorTarget: Target = { baseUrl: upstreamUrl, path: CHAT, headers: { authorization: 'Bearer bench' }, body: BODY };
  await addRow('fake upstream alone (the floor)', await saturated('floor', [floorTarget]));
  const portkeyTarget: Target = { baseUrl: portkeyUrl, path: CHAT, headers: portkeyHeaders, body: BODY };
  await addRow(PORTKEY_ROW, await saturated('Portkey', [portkeyTarget], [portkey.pid]), [portkey]);

  // 3-4. The service, saturated; Portkey again right after the non-streaming run, so that the
  // service is compared with Portkey measured on both sides of it (this machine's speed drifts).
  const one = [workspaceId];
  await addRow(
    SERVICE_ROW,
    await measureService('service non-streaming', one, () => saturated('service non-streaming', [serviceTarget(serviceA.baseUrl, apiKey)], [serviceA.server.pid]), cannonCounts),
    [serviceA.server],
  );
  await addRow(PORTKEY_AGAIN_ROW, await saturated('Portkey, again', [portkeyTarget], [portkey.pid]), [portkey]);
  await addRow(
    SERVICE_STREAM_ROW,
    await measureService(
      'service streaming',
      one,
      () => saturated('service streaming', [serviceTarget(serviceA.baseUrl, apiKey, STREAM_BODY)], [serviceA.server.pid]),
      cannonCounts,
    ),
    [serviceA.server],
  );
  // The Anthropic Messages API on the same core: the same requests, translated both ways.
  await addRow(
    MESSAGES_ROW,
    await measureService('messages non-streaming', one, () => saturated('messages non-streaming', [messagesTarget(serviceA.baseUrl, apiKey)], [serviceA.server.pid]), cannonCounts),
    [serviceA.server],
  );
  await addRow(
    MESSAGES_STREAM_ROW,
    await measureService(
      'messages streaming',
      one,
      () => saturated('messages streaming', [messagesTarget(serviceA.baseUrl, apiKey, MESSAGES_STREAM_BODY)], [serviceA.server.pid]),
      cannonCounts,
    ),
    [serviceA.server],
  );

  // 5. Open loop at a fixed rate: the latency the service adds over the floor.
  const { ratePerSecond, durationSeconds } = SETTINGS.openLoop;
  // The saturated runs wrote some 30,000 usage records and ledger rows each, on tables this small
  // that autovacuum then vacuumed and analyzed them during the fixed-rate measurements (in every
  // run, during the streaming one). Done here instead, between the measurements, so that each
  // measures the service rather than the aftermath of the one before; the line of PostgreSQL's
  // own work after each still says what ran during it.
  const vacuumStartedAt = Date.now();
  await db.query('VACUUM (ANALYZE)');
  log(`VACUUM (ANALYZE) after the saturated runs, before the fixed-rate ones: ${Date.now() - vacuumStartedAt} ms`);
  const floorFixed = await fixedRate('floor', floorTarget);
  const serviceFixed = await measureService(
    'service non-streaming, 200 req/s',
    one,
    () => fixedRate('service non-streaming', serviceTarget(serviceA.baseUrl, apiKey), serviceA.metricsUrl),
    openCounts,
  );
  const floorStreamFixed = await fixedRate('floor, streaming', { ...floorTarget, body: STREAM_BODY });
  const serviceStreamFixed = await measureService(
    'service streaming, 200 req/s',
    one,
    () => fixedRate('service streaming', serviceTarget(serviceA.baseUrl, apiKey, STREAM_BODY), serviceA.metricsUrl),
    openCounts,
  );
  const messagesFixed = await measureService(
    'messages non-streaming, 200 req/s',
    one,
    () => fixedRate('messages non-streaming', messagesTarget(serviceA.baseUrl, apiKey), serviceA.metricsUrl),
    openCounts,
  );
  const messagesStreamFixed = await measureService(
    'messages streaming, 200 req/s',
    one,
    () => fixedRate('messages streaming', messagesTarget(serviceA.baseUrl, apiKey, MESSAGES_STREAM_BODY), serviceA.metricsUrl),
    openCounts,
  );

  // 6. Many workspaces, one key each, in rotation.
  const manyIds = many.map((w) => w.workspaceId);
  await addRow(
    `service, ${many.length} workspaces in rotation`,
    await measureService(
      `service, ${many.length} workspaces`,
      manyIds,
      () => saturated(`${many.length} workspaces`, many.map((w) => serviceTarget(serviceA.baseUrl, w.apiKey)), [serviceA.server.pid]),
      cannonCounts,
    ),
    [serviceA.server],
  );

  // 7. Two replicas on the one PostgreSQL, the load split between them.
  const serviceB = await startService('service B');
  await probeService(serviceB.baseUrl, apiKey);
  const half = SETTINGS.connections / 2;
  const twoReplicas = await measureService(
    'two replicas',
    one,
    async () => {
      log(`two replicas: ${SETTINGS.warmupSeconds} s warm-up, then ${SETTINGS.durationSeconds} s, ${half} connections on each`);
      const both = () =>
        Promise.all([saturate([serviceTarget(serviceA.baseUrl, apiKey)], half, SETTINGS.durationSeconds), saturate([serviceTarget(serviceB.baseUrl, apiKey)], half, SETTINGS.durationSeconds)]);
      const warm = await Promise.all([saturate([serviceTarget(serviceA.baseUrl, apiKey)], half, SETTINGS.warmupSeconds), saturate([serviceTarget(serviceB.baseUrl, apiKey)], half, SETTINGS.warmupSeconds)]);
      const { result: run, cpuPercent } = await cpuDuring(cpuGroups([serviceA.server.pid, serviceB.server.pid]), both);
      return { warm, run, cpuPercent };
    },
    ({ warm, run }) => ({ answered2xx: [...warm, ...run].reduce((s, r) => s + r.ok2xx, 0), sent: [...warm, ...run].reduce((s, r) => s + r.sent, 0) }),
  );
  const [ra, rb] = twoReplicas.run;
  await addRow(
    'service, two replicas (sum)',
    {
      ...ra,
      reqPerSec: ra.reqPerSec + rb.reqPerSec,
      // The worse of the two: a merged histogram is not available from two autocannon runs.
      p50Ms: Math.max(ra.p50Ms, rb.p50Ms),
      p99Ms: Math.max(ra.p99Ms, rb.p99Ms),
      completed: ra.completed + rb.completed,
      sent: ra.sent + rb.sent,
      ok2xx: ra.ok2xx + rb.ok2xx,
      non2xx: ra.non2xx + rb.non2xx,
      errors: ra.errors + rb.errors,
      statusCodes: Object.fromEntries(
        [...new Set([...Object.keys(ra.statusCodes), ...Object.keys(rb.statusCodes)])].map((code) => [code, (ra.statusCodes[code] ?? 0) + (rb.statusCodes[code] ?? 0)]),
      ),
      warmup: undefined,
      cpuPercent: twoReplicas.cpuPercent,
    },
    [serviceA.server, serviceB.server],
  );

  // --- Report --------------------------------------------------------------------------
  const latency = (label: string, floor: Parameters<typeof addedLatency>[1], service: Parameters<typeof addedLatency>[2]) => addedLatency(label, floor, service, durationSeconds);
  const added = [
    latency('non-streaming', floorFixed, serviceFixed),
    latency('streaming', floorStreamFixed, serviceStreamFixed),
    // Against the same floor: the upstream answers a translated message as it answers a chat completion.
    latency('/v1/messages non-streaming', floorFixed, messagesFixed),
    latency('/v1/messages streaming', floorStreamFixed, messagesStreamFixed),
  ];

  log('');
  log(`Chat completions, ${SETTINGS.model}, max_tokens 16, against the fake upstream; 1-min load at start ${startLoad[0]}, now ${round1(os.loadavg()[0])}`);
  const tuned = TUNABLES.filter((name) => serviceEnv[name] !== undefined);
  if (tuned.length > 0) log(`Service settings: ${tuned.map((name) => `${name}=${serviceEnv[name]}`).join(', ')}`);
  reportGatewayRun(log, { settings: SETTINGS, rows, added: [{ rate: ratePerSecond, latencies: added }], checks }, table);

  // --- Targets -------------------------------------------------------------------------
  const row = (target: string) => rows.find((r) => r.target === target)!;
  const { portkeyRuns, portkeyReqPerSec, ratio, missed } = judgeAgainstPortkey(rows, { service: SERVICE_ROW, portkey: [PORTKEY_ROW, PORTKEY_AGAIN_ROW] }, added, ratePerSecond, TARGETS);
  const serviceRow = row(SERVICE_ROW);
  const serviceRows = rows.filter((r) => r.target.startsWith('service'));
  for (const [messagesRow, chatRow] of [
    [MESSAGES_ROW, SERVICE_ROW],
    [MESSAGES_STREAM_ROW, SERVICE_STREAM_ROW],
  ]) {
    const share = row(messagesRow).reqPerSec / row(chatRow).reqPerSec;
    if (share < TARGETS.messagesVsChat) {
      missed.push(`${messagesRow} ${row(messagesRow).reqPerSec} req/s is ${round3(share)}x ${chatRow}'s ${row(chatRow).reqPerSec} (target >= ${TARGETS.messagesVsChat}x)`);
    }
  }
  const fixedRuns = [serviceFixed, serviceStreamFixed, messagesFixed, messagesStreamFixed];
  const serviceNon2xx = serviceRows.reduce((s, r) => s + r.non2xx, 0) + fixedRuns.reduce((s, r) => s + r.non2xx, 0);
  const serviceErrors = serviceRows.reduce((s, r) => s + r.errors, 0) + fixedRuns.reduce((s, r) => s + r.errors, 0);
  if (serviceNon2xx > 0 || serviceErrors > 0) missed.push(`the service answered ${serviceNon2xx} non-2xx responses and ${serviceErrors} requests failed (target: none)`);
  missed.push(...missedChecks(checks));
  log('');
  log(
    `Service non-streaming / Portkey: ${round3(ratio)}x (target >= ${TARGETS.throughputVsPortkey}x), against the mean of Portkey's runs before and ` +
      `after it (${portkeyRuns.join(' and ')} req/s: ${portkeyRuns.map((r) => `${round3(serviceRow.reqPerSec / r)}x`).join(' and ')})`,
  );
  log(
    `/v1/messages / chat completions: ${round3(row(MESSAGES_ROW).reqPerSec / serviceRow.reqPerSec)}x non-streaming, ` +
      `${round3(row(MESSAGES_STREAM_ROW).reqPerSec / row(SERVICE_STREAM_ROW).reqPerSec)}x streaming (target >= ${TARGETS.messagesVsChat}x)`,
  );
  if (missed.length === 0) log('All targets MET');
  else for (const m of missed) log(`Target NOT MET: ${m}`);

  const results = {
    ...gatewayResults({ settings: SETTINGS, targets: TARGETS, missed, rows, portkeyReqPerSec, ratio, added, checks }, ctx),
    serviceSettings: Object.fromEntries(TUNABLES.map((name) => [name, serviceEnv[name] ?? 'default'])),
  };
  const file = await writeResults('chat', results);
  log(`Results written to ${file} (${results.wallSeconds} s)`);
  return missed.length === 0 ? 0 : 2;
}

/** One plain and one streamed request of each API must answer 200 before anything is measured. */
async function probeService(baseUrl: string, apiKey: string): Promise<void> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
  for (const [route, body] of [
    [CHAT, BODY],
    [CHAT, STREAM_BODY],
    [MESSAGES, MESSAGES_BODY],
    [MESSAGES, MESSAGES_STREAM_BODY],
  ]) {
    const res = await fetch(`${baseUrl}${route}`, { method: 'POST', headers, body });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`The service answered ${res.status} to a request to ${route}: ${text.slice(0, 500)}`);
  }
  // The answers came from the settlement journal, before their commit: reading the wallet
  // waits for it, so that the probe's usage records are not counted in the next measurement.
  const wallet = await fetch(`${baseUrl}/v1/wallet`, { headers });
  if (wallet.status !== 200) throw new Error(`The service answered ${wallet.status} to GET /v1/wallet: ${(await wallet.text()).slice(0, 500)}`);
}

/**
 * The workspaces of the many-workspaces run, through WorkspacesService as the CLI does,
 * in one app started in this process and closed again before anything is measured.
 */
async function createWorkspaces(databaseUrl: string, count: number): Promise<{ workspaceId: string; apiKey: string }[]> {
  const { createApp } = await import('../src/app.factory');
  const { loadConfig } = await import('../src/config/app-config');
  const { WorkspacesService } = await import('../src/workspaces/workspaces.service');
  const app = await createApp(loadConfig({ LOG_LEVEL: 'error' }), databaseUrl, { logger: false });
  try {
    const workspaces = app.get(WorkspacesService);
    const created: { workspaceId: string; apiKey: string }[] = [];
    for (let i = 0; i < count; i += 1) {
      const w = await workspaces.create({ name: `Benchmark ${i + 1}`, tier: 'enterprise', balanceMillicents: SETTINGS.balanceMillicents });
      await workspaces.setTier(w.workspace.id, 'enterprise', SETTINGS.customRateLimitRpm);
      created.push({ workspaceId: w.workspace.id, apiKey: w.apiKey });
    }
    return created;
  } finally {
    await closeApp(app);
  }
}

runBench('chat', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
