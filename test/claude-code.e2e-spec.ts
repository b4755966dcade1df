import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, request, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { FakeOpenAi, OpenAiScenario, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/**
 * Claude Code itself (the `@anthropic-ai/claude-code` dev dependency) as a client of
 * `POST /v1/messages`: `claude -p` against the app, on gpt-4o-mini served by a fake of OpenAI
 * scripted to call Claude Code's Read tool on a file of a temporary folder and then to quote it.
 * A recording proxy between Claude Code and the app sees every request it makes.
 */

const ROOT = path.resolve(__dirname, '..');
const SENTENCE = 'The heron on the quay counts seventeen green lanterns.';
/** The longest one run may take before it is killed (it takes a few seconds). */
const CLAUDE_TIMEOUT_MS = 120_000;

/** Claude Code's native binary: the npm bin (its postinstall links the native one there), else the platform package's own. */
function findClaudeCode(): { binary: string; version: string } | { problem: string } {
  const platform = `${process.platform}-${process.arch}`;
  const candidates = [
    path.join(ROOT, 'node_modules/.bin/claude'),
    path.join(ROOT, `node_modules/@anthropic-ai/claude-code-${platform}/claude`),
    path.join(ROOT, `node_modules/@anthropic-ai/claude-code-${platform}-musl/claude`),
  ];
  const problems: string[] = [];
  for (const binary of candidates) {
    const run = spawnSync(binary, ['--version'], { env: { PATH: process.env.PATH, HOME: tmpdir() }, encoding: 'utf8', timeout: 30_000 });
    if (run.status === 0 && /Claude Code/.test(run.stdout)) return { binary, version: run.stdout.trim() };
    problems.push(`${path.relative(ROOT, binary)}: ${run.error?.message ?? `exit ${run.status}: ${(run.stderr || run.stdout).trim().slice(0, 200)}`}`);
  }
  return { problem: problems.join('; ') };
}

const claudeCode = findClaudeCode();

/** Fails under CI=true (a missing dependency must never turn into a green run), skipped loudly elsewhere. */
function describeWithClaudeCode(name: string, fn: () => void): void {
  if ('binary' in claudeCode) {
    describe(name, fn);
    return;
  }
  const hint = `Claude Code cannot run on this machine (${claudeCode.problem}). It comes with \`npm ci\` (@anthropic-ai/claude-code and its platform package).`;
  if (process.env.CI === 'true') throw new Error(`CI=true and ${hint} The suite "${name}" cannot run.`);
  console.warn(`\n⚠️  SKIPPING "${name}": ${hint}\n`);
  describe.skip(`${name} [SKIPPED: Claude Code cannot run]`, fn);
}

/** A request Claude Code made, and the status the app answered it with. */
interface SeenRequest {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: Record<string, any> | null;
  status: number;
}

/** A proxy in front of the app that records each request and its status, and passes the answer (streams too) through untouched. */
async function startRecordingProxy(target: string): Promise<{ url: string; seen: SeenRequest[]; close(): Promise<void> }> {
  const seen: SeenRequest[] = [];
  const { hostname, port } = new URL(target);
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const entry: SeenRequest = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: null, status: 0 };
      try {
        entry.body = raw.length > 0 ? (JSON.parse(raw.toString('utf8')) as Record<string, any>) : null;
      } catch {
        // recorded without its body
      }
      seen.push(entry);
      const upstream = request({ host: hostname, port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        entry.status = answer.statusCode ?? 0;
        res.writeHead(entry.status, answer.headers);
        answer.pipe(res);
      });
      upstream.on('error', () => res.destroy());
      upstream.end(raw);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface ClaudeRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/**
 * `claude -p <prompt>` in `cwd`, with nothing of the caller's environment but PATH: a throwaway
 * HOME, our base URL and key. Its own process group, killed whole on timeout.
 */
function runClaude(binary: string, prompt: string, options: { cwd: string; home: string; env: Record<string, string> }): Promise<ClaudeRun> {
  const child = spawn(binary, ['-p', prompt, '--allowedTools', 'Read', '--no-session-persistence'], {
    cwd: options.cwd,
    env: { PATH: process.env.PATH, HOME: options.home, TMPDIR: options.home, NO_COLOR: '1', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  }, CLAUDE_TIMEOUT_MS);
  return new Promise((resolve) => {
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

type ChatMessage = { role: string; content: unknown; tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>; tool_call_id?: string };
type ChatTool = { function: { name: string } };
const toolNamesOf = (body: Record<string, unknown>) => ((body.tools as ChatTool[] | undefined) ?? []).map((tool) => tool.function.name);
const toolMessageOf = (body: Record<string, unknown>) => (body.messages as ChatMessage[]).find((message) => message.role === 'tool');

describeWithClaudeCode('Claude Code (claude -p) against POST /v1/messages', () => {
  let t: TestApp;
  let upstream: FakeOpenAi;
  let db: DataSource;
  let folder: string;
  let home: string;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({ config: { llmSimulator: 'off', upstreamMaxRetries: 0, providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } } } });
    db = t.app.get(DataSource);
    folder = await mkdtemp(path.join(tmpdir(), 'claude-code-cwd-'));
    home = await mkdtemp(path.join(tmpdir(), 'claude-code-home-'));
    await writeFile(path.join(folder, 'notes.txt'), `${SENTENCE}\n`);
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
    if (folder) await rm(folder, { recursive: true, force: true });
    if (home) await rm(home, { recursive: true, force: true });
  });

  /**
   * `claude -p <prompt>` on gpt-4o-mini with a new workspace's key, the fake model answering by
   * `model`; what Claude Code sent (through the proxy) and the upstream chat calls it caused.
   */
  async function claudeCodeRun(prompt: string, model: (body: Record<string, unknown>) => OpenAiScenario) {
    const workspace = await t.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    const upstreamBefore = upstream.requests.length;
    upstream.respondWith(model);
    const proxy = await startRecordingProxy(t.baseUrl);
    let run: ClaudeRun;
    try {
      run = await runClaude((claudeCode as { binary: string }).binary, prompt, {
        cwd: folder,
        home,
        env: {
          ANTHROPIC_BASE_URL: proxy.url,
          ANTHROPIC_API_KEY: workspace.apiKey,
          ANTHROPIC_MODEL: 'gpt-4o-mini',
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        },
      });
    } finally {
      await proxy.close();
      upstream.respondWith(null);
    }
    const chats = upstream.requests.slice(upstreamBefore).filter((recorded) => recorded.path.endsWith('/chat/completions'));
    if (process.env.DEBUG_CLAUDE_CODE) console.log(JSON.stringify({ run, seen: proxy.seen, upstream: chats.map((chat) => chat.body) }, null, 2));
    expect({ code: run.code, timedOut: run.timedOut, stderr: run.code === 0 ? '' : run.stderr }).toEqual({ code: 0, timedOut: false, stderr: '' });
    return { run, workspace, seen: proxy.seen, chats };
  }

  /**
   * Every request Claude Code made was answered (count_tokens too, if it calls it); each POST
   * /v1/messages was one upstream call, one usage record of source messages and one charge;
   * the wallet balances and nothing stays held.
   */
  async function expectEachCallBilledOnce(workspace: TestWorkspace, seen: SeenRequest[], chats: unknown[]) {
    expect(seen.filter((request) => request.url.startsWith('/v1/') && request.status !== 200).map((request) => `${request.method} ${request.url}: ${request.status}`)).toEqual([]);
    const messageCalls = seen.filter((request) => request.method === 'POST' && /^\/v1\/messages(\?|$)/.test(request.url));
    expect(messageCalls.length).toBeGreaterThanOrEqual(2);
    expect(chats).toHaveLength(messageCalls.length);
    await t.quiet(workspace.id);
    const records = (await db.query(
      `SELECT source, status, model, total_cost_millicents::float AS cost, charged_millicents::int AS charged FROM usage_records WHERE workspace_id = $1`,
      [workspace.id],
    )) as Array<{ source: string; status: string; model: string; cost: number; charged: number }>;
    expect(records).toHaveLength(messageCalls.length);
    for (const record of records) expect(record).toEqual({ source: 'messages', status: 'success', model: 'gpt-4o-mini', cost: expect.any(Number), charged: expect.any(Number) });
    // Each call costs a fraction of a millicent here: the wallet is charged whole millicents, the fractions carried.
    expect(records.every((record) => record.cost > 0)).toBe(true);
    const wallet = await walletInvariants(db, workspace.id);
    expect(wallet).toEqual({ balance: wallet.ledger, reserved: 0, ledger: wallet.ledger, holds: 0 });
    expect(10_000_000 - wallet.balance).toBe(records.reduce((sum, record) => sum + record.charged, 0));
  }

  it('reads a file with its Read tool through a non-Claude model, quotes it, exits 0, and each model call is billed once', async () => {
    const notes = path.join(folder, 'notes.txt');
    // The fake model: asks once for Claude Code's Read tool on notes.txt, quotes the file once a tool result holds it; any other call (a title, a quota check) gets a plain text.
    let readAsked = false;
    const { run, workspace, seen, chats } = await claudeCodeRun('Read notes.txt and quote the sentence in it.', (body) => {
      const toolResult = toolMessageOf(body);
      if (toolResult) {
        const quoted = typeof toolResult.content === 'string' && toolResult.content.includes(SENTENCE);
        return { kind: 'text', text: quoted ? `notes.txt says: "${SENTENCE}"` : 'The tool result did not hold the file.' };
      }
      if (!readAsked && toolNamesOf(body).includes('Read')) {
        readAsked = true;
        return { kind: 'tool_calls', text: 'Let me read it.', calls: [{ id: 'call_read_1', name: 'Read', arguments: JSON.stringify({ file_path: notes }) }] };
      }
      return { kind: 'text', text: 'Noted.' };
    });
    expect(run.stdout).toContain(SENTENCE);

    // Upstream: the Read call went out, and its result (the file's text) came back as a tool message.
    const final = chats.find((chat) => toolMessageOf(chat.body))!.body.messages as ChatMessage[];
    expect(final.find((message) => message.tool_calls)?.tool_calls).toEqual([
      { id: 'call_read_1', type: 'function', function: { name: 'Read', arguments: JSON.stringify({ file_path: notes }) } },
    ]);
    expect(final.find((message) => message.role === 'tool')).toMatchObject({ tool_call_id: 'call_read_1', content: expect.stringContaining(SENTENCE) });
    // Claude Code's billing line (it varies with the request: a cache breaker on prefix-caching upstreams) stays here.
    expect(seen[0].body?.system[0].text).toMatch(/^x-anthropic-billing-header: /);
    expect(chats.map((chat) => JSON.stringify(chat.body.messages).includes('x-anthropic-billing-header'))).not.toContain(true);
    await expectEachCallBilledOnce(workspace, seen, chats);
  });

  it("loads a deferred tool with its ToolSearch (a tool_reference result): the model sees the tool only once it is loaded", async () => {
    // Claude Code marks some tools defer_loading (WebFetch, ...): ToolSearch answers with tool_reference blocks, and Anthropic then shows the tool.
    let searched = false;
    const { run, workspace, seen, chats } = await claudeCodeRun('Load the WebFetch tool.', (body) => {
      const toolResult = toolMessageOf(body);
      if (toolResult) {
        const loaded = toolNamesOf(body).includes('WebFetch') && String(toolResult.content).includes('"name":"WebFetch"');
        return { kind: 'text', text: loaded ? 'WebFetch is loaded.' : 'WebFetch is missing.' };
      }
      if (!searched && toolNamesOf(body).includes('ToolSearch')) {
        searched = true;
        return { kind: 'tool_calls', calls: [{ id: 'call_search_1', name: 'ToolSearch', arguments: JSON.stringify({ query: 'select:WebFetch' }) }] };
      }
      return { kind: 'text', text: 'Noted.' };
    });
    expect(run.stdout).toContain('WebFetch is loaded.');
    // Before the search, no deferred tool (nor Claude Code's DeferredToolPlaceholder) reached the model.
    const first = chats.find((chat) => toolNamesOf(chat.body).includes('ToolSearch'))!;
    expect(toolNamesOf(first.body)).not.toContain('WebFetch');
    expect(toolNamesOf(first.body)).not.toContain('DeferredToolPlaceholder');
    const final = chats.find((chat) => toolMessageOf(chat.body))!;
    expect(toolMessageOf(final.body)!.content).toMatch(/^<functions>\n<function>\{"description":.*"name":"WebFetch","parameters":\{.*\}<\/function>\n<\/functions>$/s);
    await expectEachCallBilledOnce(workspace, seen, chats);
  });
});
