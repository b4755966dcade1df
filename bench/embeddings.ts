/**
 * Throughput and added latency of `POST /v1/embeddings`, with full accounting, against
 * Portkey's open-source gateway as the peer (issue 42), on the rig of the chat benchmark
 * (bench/gateway-rig.ts): the fake upstream (bench/chat-upstream.ts answers `/v1/embeddings`
 * too), Portkey in front of it, the service as production runs it. See bench/README.md.
 *
 *   npm run bench:embeddings                (alone, on its own PostgreSQL)
 *   measureEmbeddings(ctx)                  (at the end of bench/file-search.ts)
 *
 * Requests as the OpenAI SDK sends them (`encoding_format: "base64"`, its default): one
 * query of a few words (the targets: the chat path's), and a batch of 32 passages of about
 * 100 words each (what ingestion sends; its inputs' tokens are what the hold counts).
 *
 * Exit code: 0 when every target is met, 2 when one is missed (printed), 1 on an error.
 */
import 'reflect-metadata';
import * as os from 'node:os';
import type { Target } from './chat-load';
import {
  addedLatency,
  gatewayResults,
  judgeAgainstPortkey,
  missedChecks,
  portkeyVersion,
  reportGatewayRun,
  round1,
  round3,
  type Row,
  saturatedRow,
  startGatewayRig,
} from './gateway-rig';
import { type BenchContext, MESSAGE_WORDS, runBench, table, writeResults } from './harness';

const SETTINGS = {
  model: 'text-embedding-3-small',
  batchInputs: 32,
  wordsPerPassage: 100,
  /** The batches' fixed rate (not judged): 200 of them a second is past what one process on this machine serves. */
  batchRatePerSecond: 25,
  connections: 32,
  warmupSeconds: 3,
  durationSeconds: 10,
  openLoop: { ratePerSecond: 200, warmupSeconds: 2, durationSeconds: 10, timeoutMs: 30_000 },
  balanceMillicents: 1_000_000_000_000,
  customRateLimitRpm: 100_000_000,
  settleGraceMs: 10_000,
} as const;

/** How long the measurement may take, alone or at the end of another benchmark. */
export const EMBEDDINGS_BENCH_MS = 420_000;

const TARGETS = {
  /** Service req/s (one query), at least this times Portkey's in the same run. */
  throughputVsPortkey: 1.5,
  addedP50Ms: 2,
  addedP99Ms: 10,
} as const;

const EMBEDDINGS = '/v1/embeddings';
const PORTKEY_ROW = `Portkey gateway ${portkeyVersion()} (no accounting)`;
const PORTKEY_AGAIN_ROW = `Portkey gateway ${portkeyVersion()}, again`;
const SERVICE_ROW = 'service, one query';

/** A passage of `words` words drawn in order from the harness's word list (deterministic). */
function passage(index: number, words: number): string {
  return Array.from({ length: words }, (_, i) => MESSAGE_WORDS[(index * 7 + i) % MESSAGE_WORDS.length]).join(' ');
}
const QUERY_BODY = JSON.stringify({ model: SETTINGS.model, input: 'How long do I have to send something back?', encoding_format: 'base64' });
const BATCH_BODY = JSON.stringify({
  model: SETTINGS.model,
  input: Array.from({ length: SETTINGS.batchInputs }, (_, i) => passage(i, SETTINGS.wordsPerPassage)),
  encoding_format: 'base64',
});

export async function measureEmbeddings(ctx: BenchContext): Promise<number> {
  const { log, startLoad } = ctx;
  log('');
  log(`/v1/embeddings: 1-min load average at start ${round1(os.loadavg()[0])} on ${os.cpus().length} CPUs`);
  // Portkey 1.15 fails every embeddings request on Node's fetch without this shim (see the file).
  const rig = await startGatewayRig(ctx, {
    name: 'embeddings',
    settings: SETTINGS,
    portkeyProbe: { path: EMBEDDINGS, body: QUERY_BODY },
    portkeyPreloads: ['portkey-mutable-fetch.js'],
  });
  const { upstreamUrl, portkey, portkeyUrl, portkeyHeaders, workspaceId, apiKey, db, checks, saturated, fixedRate, measureService, cannonCounts, openCounts } = rig;
  const service = await rig.startService('service');
  await probeService(service.baseUrl, apiKey);
  log(`Service on ${service.baseUrl} (pid ${service.server.pid}); an embeddings request answers 200 with ${SETTINGS.batchInputs} base64 vectors`);

  const one = [workspaceId];
  const floor = (body: string): Target => ({ baseUrl: upstreamUrl, path: EMBEDDINGS, headers: { authorization: 'Bearer bench' }, body });
  const viaService = (body: string): Target => ({ baseUrl: service.baseUrl, path: EMBEDDINGS, headers: { authorization: `Bearer ${apiKey}` }, body });
  const viaPortkey: Target = { baseUrl: portkeyUrl, path: EMBEDDINGS, headers: portkeyHeaders, body: QUERY_BODY };

  // Saturated: the floor, Portkey, the service, Portkey again (this machine's speed drifts), then the batches.
  const rows: Row[] = [];
  rows.push(await saturatedRow('fake upstream alone (the floor)', await saturated('floor', [floor(QUERY_BODY)])));
  rows.push(await saturatedRow(PORTKEY_ROW, await saturated('Portkey', [viaPortkey], [portkey.pid]), [portkey]));
  rows.push(
    await saturatedRow(
      SERVICE_ROW,
      await measureService('service, one query', one, () => saturated('service, one query', [viaService(QUERY_BODY)], [service.server.pid]), cannonCounts),
      [service.server],
    ),
  );
  rows.push(await saturatedRow(PORTKEY_AGAIN_ROW, await saturated('Portkey, again', [viaPortkey], [portkey.pid]), [portkey]));
  rows.push(await saturatedRow(`fake upstream alone, ${SETTINGS.batchInputs} passages`, await saturated('floor, batch', [floor(BATCH_BODY)])));
  rows.push(
    await saturatedRow(
      `service, ${SETTINGS.batchInputs} passages`,
      await measureService('service, batch', one, () => saturated('service, batch', [viaService(BATCH_BODY)], [service.server.pid]), cannonCounts),
      [service.server],
    ),
  );

  // At a fixed rate: the latency the service adds over the floor (see bench/chat.ts on the VACUUM).
  await db.query('VACUUM (ANALYZE)');
  const { ratePerSecond, durationSeconds } = SETTINGS.openLoop;
  const floorQuery = await fixedRate('floor, one query', floor(QUERY_BODY));
  const serviceQuery = await measureService('service, one query, 200 req/s', one, () => fixedRate('service, one query', viaService(QUERY_BODY), service.metricsUrl), openCounts);
  const batchRate = SETTINGS.batchRatePerSecond;
  const floorBatch = await fixedRate('floor, batch', floor(BATCH_BODY), undefined, batchRate);
  const serviceBatch = await measureService(
    `service, batch, ${batchRate} req/s`,
    one,
    () => fixedRate('service, batch', viaService(BATCH_BODY), service.metricsUrl, batchRate),
    openCounts,
  );
  const added = [addedLatency('one query', floorQuery, serviceQuery, durationSeconds)];
  const addedBatch = [addedLatency(`${SETTINGS.batchInputs} passages`, floorBatch, serviceBatch, durationSeconds)];

  // --- Report --------------------------------------------------------------------------
  log('');
  log(
    `/v1/embeddings, ${SETTINGS.model}, base64 (the SDK's default), against the fake upstream; one query, and ${SETTINGS.batchInputs} passages of ` +
      `${SETTINGS.wordsPerPassage} words; 1-min load at start ${startLoad[0]}, now ${round1(os.loadavg()[0])}`,
  );
  const rates = [
    { rate: ratePerSecond, latencies: added },
    { rate: `${batchRate} (not a target)`, latencies: addedBatch },
  ];
  reportGatewayRun(log, { settings: SETTINGS, rows, added: rates, checks }, table);

  // --- Targets -------------------------------------------------------------------------
  const { portkeyRuns, ratio, portkeyReqPerSec, missed } = judgeAgainstPortkey(rows, { service: SERVICE_ROW, portkey: [PORTKEY_ROW, PORTKEY_AGAIN_ROW] }, added, ratePerSecond, TARGETS);
  const serviceRows = rows.filter((r) => r.target.startsWith('service'));
  const failures = [...serviceRows, serviceQuery, serviceBatch].reduce((sum, r) => sum + r.non2xx + r.errors, 0);
  if (failures > 0) missed.push(`the service answered ${failures} non-2xx responses or failed requests (target: none)`);
  missed.push(...missedChecks(checks));
  log('');
  log(`Service / Portkey, one query: ${round3(ratio)}x (target >= ${TARGETS.throughputVsPortkey}x), against the mean of Portkey's runs before and after it (${portkeyRuns.join(' and ')} req/s)`);
  if (missed.length === 0) log('All /v1/embeddings targets MET');
  else for (const m of missed) log(`Target NOT MET: ${m}`);

  const results = { ...gatewayResults({ settings: SETTINGS, targets: TARGETS, missed, rows, portkeyReqPerSec, ratio, added, checks }, ctx), addedLatencyBatches: addedBatch };
  const file = await writeResults('embeddings', results);
  log(`Results written to ${file}`);
  return missed.length === 0 ? 0 : 2;
}

/** A query and a batch must answer 200 with one base64 vector per input before anything is measured. */
async function probeService(baseUrl: string, apiKey: string): Promise<void> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
  for (const [body, inputs] of [
    [QUERY_BODY, 1],
    [BATCH_BODY, SETTINGS.batchInputs],
  ] as const) {
    const res = await fetch(`${baseUrl}${EMBEDDINGS}`, { method: 'POST', headers, body });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`The service answered ${res.status} to an embeddings request: ${text.slice(0, 500)}`);
    const data = (JSON.parse(text) as { data: { embedding: unknown }[] }).data;
    if (data.length !== inputs || data.some((d) => typeof d.embedding !== 'string')) throw new Error(`The service answered ${data.length} vectors for ${inputs} inputs, or not in base64`);
  }
  // Waits for the probes' settlement, so that their usage records are not counted in the first measurement.
  const wallet = await fetch(`${baseUrl}/v1/wallet`, { headers });
  if (wallet.status !== 200) throw new Error(`The service answered ${wallet.status} to GET /v1/wallet`);
}

if (require.main === module) runBench('embeddings', { hardTimeoutMs: EMBEDDINGS_BENCH_MS }, measureEmbeddings);
