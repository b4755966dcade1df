import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import OpenAI from 'openai';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import {
  MAX_IMAGE_URL_CHARS,
  MAX_IMAGE_URL_CHARS_PER_REQUEST,
  MAX_IMAGES_PER_REQUEST,
  MAX_MESSAGE_CONTENT_CHARS,
  MAX_MESSAGES,
  MAX_TOOLS,
} from '../src/chat/dto/request-limits';
import { inSavepoint } from '../src/common/database/savepoint';
import { preparedRows } from '../src/common/database/prepared-rows';
import { isDatabaseUnavailable } from '../src/common/errors/database-unavailable';
import { MAX_JSON_DEPTH, MAX_JSON_VALUES } from '../src/common/validation/input-guard';
import { runMigrations } from '../src/database/data-source';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { createTestDatabase } from './support/test-database';

const MODEL = 'gpt-4o-mini';
const NUL = '\u0000';
const LONE_SURROGATE = '\ud800';

/** Raw HTTP: hostile bytes go out exactly as written, and every answer is read as it came. */
async function send(t: TestApp, workspace: TestWorkspace, method: string, url: string, body?: string, contentType = 'application/json') {
  const response = await fetch(`${t.baseUrl}${url}`, {
    method,
    headers: { Authorization: `Bearer ${workspace.apiKey}`, ...(body !== undefined ? { 'Content-Type': contentType } : {}) },
    body,
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : null };
}

function expectBadRequest(answer: { status: number; body: { error?: unknown } }, param: string, code: string) {
  expect({ status: answer.status, error: answer.body.error }).toEqual({
    status: 400,
    error: { type: 'bad_request', message: expect.any(String), code, param },
  });
}

const chatBody = (fields: Record<string, unknown> = {}) =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }], ...fields });

/** `{"x": [[[...]]]}`, `levels` arrays deep, written by hand: JSON.stringify itself would recurse. */
const deeplyNested = (levels: number) => '['.repeat(levels) + ']'.repeat(levels);

describe('hostile input', () => {
  let t: TestApp;
  let workspace: TestWorkspace;
  let conversationId: string;

  beforeAll(async () => {
    // A body limit above the per-request image limit, so that the limits of the request are what is tested.
    t = await startTestApp({ config: { bodyLimit: '64mb' } });
    workspace = await t.createWorkspace({ tier: 'enterprise' });
    conversationId = ((await workspace.client.post('/conversations', { body: {} })) as { id: string }).id;
  });
  afterAll(() => t.close());

  describe('NUL and lone surrogates in stored fields and filters are a 400 naming the field', () => {
    it.each([
      ['title', { title: `a${NUL}b` }, 'title'],
      ['user_id', { user_id: `u${NUL}` }, 'user_id'],
      ['assistant_id', { assistant_id: `bot${NUL}` }, 'assistant_id'],
      ['a metadata value', { metadata: { channel: `web${NUL}` } }, 'metadata.channel'],
      ['a metadata key', { metadata: { [`ke${NUL}y`]: 'v' } }, 'metadata.ke\\u0000y'],
      ['a lone surrogate in metadata', { metadata: { channel: `web${LONE_SURROGATE}` } }, 'metadata.channel'],
      ['a lone low surrogate in the title', { title: `\udc00 alone` }, 'title'],
    ])('POST /v1/conversations: %s', async (_label, fields, param) => {
      expectBadRequest(await send(t, workspace, 'POST', '/v1/conversations', JSON.stringify(fields)), param, 'invalid_string');
    });

    it.each([
      ['title', { title: `a${NUL}b` }, 'title'],
      ['a metadata key', { metadata: { [`k${NUL}`]: 'v' } }, 'metadata.k\\u0000'],
      ['a lone surrogate in a metadata key', { metadata: { [`k${LONE_SURROGATE}`]: 'v' } }, 'metadata.k\ufffd'],
    ])('PATCH /v1/conversations/{id}: %s', async (_label, fields, param) => {
      const answer = await send(t, workspace, 'PATCH', `/v1/conversations/${conversationId}`, JSON.stringify(fields));
      expectBadRequest(answer, param, 'invalid_string');
    });

    it.each([
      ['/v1/conversations?user_id=a%00b', 'user_id'],
      ['/v1/conversations?assistant_id=%00', 'assistant_id'],
      ['/v1/conversations/search?q=refund%00', 'q'],
      ['/v1/conversations/search?q=refund&user_id=%00', 'user_id'],
      ['/v1/usage/recent?user_id=u%00', 'user_id'],
      ['/v1/usage/recent?model=gpt%00', 'model'],
    ])('GET %s', async (url, param) => {
      expectBadRequest(await send(t, workspace, 'GET', url), param, 'invalid_string');
    });

    it.each([
      ['assistant_id', { assistant_id: `bot${NUL}`, model: undefined }, 'assistant_id'],
      ['user_id', { user_id: `u${NUL}` }, 'user_id'],
      ['subscription_id', { subscription_id: `s${NUL}` }, 'subscription_id'],
      ['conversation_id', { conversation_id: `c${NUL}` }, 'conversation_id'],
      ['a message with conversation_id', { conversation_id: 'CONVERSATION', messages: [{ role: 'user', content: `a${NUL}b` }] }, 'messages.0.content'],
      ['a lone surrogate in a message', { conversation_id: 'CONVERSATION', messages: [{ role: 'user', content: `a${LONE_SURROGATE}` }] }, 'messages.0.content'],
      ['a message name', { messages: [{ role: 'user', content: 'hi', name: `n${NUL}` }] }, 'messages.0.name'],
      ['a text part', { messages: [{ role: 'user', content: [{ type: 'text', text: `t${NUL}` }] }] }, 'messages.0.content.0.text'],
      ['an unknown field', { metadata: { note: `x${NUL}` } }, 'metadata.note'],
    ])('POST /v1/chat/completions: %s', async (_label, fields, param) => {
      const body = chatBody(fields).replace('CONVERSATION', conversationId);
      for (const stream of [false, true]) {
        const answer = await send(t, workspace, 'POST', '/v1/chat/completions', body.replace(/^\{/, `{"stream": ${stream},`));
        expectBadRequest(answer, param, 'invalid_string');
      }
    });

    it('is an SDK BadRequestError with the param, and nothing is charged', async () => {
      const before = await send(t, workspace, 'GET', '/v1/wallet');
      const error = await workspace.client.chat.completions
        .create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], user: 'ignored', user_id: `u${NUL}` } as never)
        .catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('user_id');
      const after = await send(t, workspace, 'GET', '/v1/wallet');
      expect(after.body).toEqual(before.body);
    });

    it('keeps accepting text that is well formed: emoji (surrogate pairs) and other scripts', async () => {
      const title = 'Réclamation 😀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 日本語';
      const created = (await workspace.client.post('/conversations', { body: { metadata: { mood: '😀' } } })) as { id: string };
      const updated = await send(t, workspace, 'PATCH', `/v1/conversations/${created.id}`, JSON.stringify({ title }));
      expect(updated.status).toBe(200);
      expect(updated.body.title).toBe(title);
      expect(updated.body.metadata).toEqual({ mood: '😀' });
    });
  });

  describe('keys and shapes no later step can handle', () => {
    it('refuses a "__proto__" metadata key instead of dropping it', async () => {
      const answer = await send(t, workspace, 'POST', '/v1/conversations', '{"metadata": {"__proto__": "x", "a": "b"}}');
      expectBadRequest(answer, 'metadata.__proto__', 'invalid_key');
    });

    it.each([
      ['POST', '/v1/conversations', (nested: string) => `{"title": "t", "extra": ${nested}}`, 'extra'],
      ['PATCH', '/v1/conversations/CONVERSATION', (nested: string) => `{"metadata": {}, "extra": ${nested}}`, 'extra'],
      ['POST', '/v1/chat/completions', (nested: string) => chatBody().replace(/\}$/, `, "extra": ${nested}}`), 'extra'],
    ])('refuses JSON nested 5,000 levels deep: %s %s', async (method, url, body, field) => {
      const answer = await send(t, workspace, method, url.replace('CONVERSATION', conversationId), body(deeplyNested(5000)));
      expectBadRequest(answer, `${field}${'.0'.repeat(MAX_JSON_DEPTH - 1)}`, 'nesting_too_deep');
    });

    it(`accepts nesting up to ${MAX_JSON_DEPTH} levels (a deep JSON Schema of a tool)`, async () => {
      const body = chatBody().replace(/\}$/, `, "extra": ${deeplyNested(MAX_JSON_DEPTH - 1)}}`);
      expect((await send(t, workspace, 'POST', '/v1/chat/completions', body)).status).toBe(200);
    });

    it(`refuses a body of more than ${MAX_JSON_VALUES} JSON values, naming the field that holds them`, async () => {
      const body = `{"title": "t", "padding": [${new Array(MAX_JSON_VALUES).fill(0).join(',')}]}`;
      expectBadRequest(await send(t, workspace, 'POST', '/v1/conversations', body), 'padding', 'too_many_values');
    });

    it('refuses 300,000 tiny messages before any work on them', async () => {
      const messages = new Array(300_000).fill({ role: 'user', content: 'x' });
      const answer = await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages }));
      expectBadRequest(answer, 'messages', 'too_many_values');
    });
  });

  describe('size limits of a chat request', () => {
    const image = (url: string) => ({ type: 'image_url', image_url: { url } });

    it(`refuses more than ${MAX_MESSAGES} messages`, async () => {
      const messages = new Array(MAX_MESSAGES + 1).fill({ role: 'user', content: 'x' });
      expectBadRequest(await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages })), 'messages', 'array_too_long');
    });

    it(`refuses a message content of more than ${MAX_MESSAGE_CONTENT_CHARS} characters`, async () => {
      const messages = [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'x'.repeat(MAX_MESSAGE_CONTENT_CHARS + 1) },
      ];
      expectBadRequest(await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages })), 'messages.1.content', 'string_too_long');
    });

    it(`refuses an image URL of more than ${MAX_IMAGE_URL_CHARS} characters`, async () => {
      const url = `data:image/png;base64,${'A'.repeat(MAX_IMAGE_URL_CHARS)}`;
      const messages = [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, image(url)] }];
      const answer = await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages }));
      expectBadRequest(answer, 'messages.0.content.1.image_url.url', 'string_too_long');
    });

    it(`refuses more than ${MAX_IMAGE_URL_CHARS_PER_REQUEST} characters of images in one request`, async () => {
      const url = `data:image/png;base64,${'A'.repeat(MAX_IMAGE_URL_CHARS_PER_REQUEST / 3)}`;
      const messages = [1, 2, 3].map(() => ({ role: 'user', content: [image(url)] }));
      expectBadRequest(await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages })), 'messages', 'images_too_large');
    });

    it(`refuses more than ${MAX_IMAGES_PER_REQUEST} images in one request`, async () => {
      const parts = new Array(MAX_IMAGES_PER_REQUEST + 1).fill(image('https://example.com/cat.png'));
      const answer = await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages: [{ role: 'user', content: parts }] }));
      expectBadRequest(answer, 'messages', 'too_many_images');
    });

    it(`refuses more than ${MAX_TOOLS} tools`, async () => {
      const tools = new Array(MAX_TOOLS + 1).fill(0).map((_, index) => ({ type: 'function', function: { name: `tool_${index}` } }));
      expectBadRequest(await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ tools })), 'tools', 'array_too_long');
    });
  });

  describe('validation messages', () => {
    it('refuses an empty content array, as OpenAI does', async () => {
      const answer = await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages: [{ role: 'user', content: [] }] }));
      expectBadRequest(answer, 'messages.0.content', 'invalid_value');
    });

    it('refuses an assistant tool call without its function', async () => {
      const messages = [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function' }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'Sunny' },
      ];
      const answer = await send(t, workspace, 'POST', '/v1/chat/completions', chatBody({ messages }));
      expectBadRequest(answer, 'messages.1.tool_calls.0.function', 'invalid_value');
    });

    it.each([
      ['/v1/conversations', { title: 5 }, 'title', 'title must be a string'],
      ['/v1/conversations', { user_id: ['a'] }, 'user_id', 'user_id must be a string'],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: '5' }, 'max_tokens', 'max_tokens must be an integer'],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], temperature: '0.5' }, 'temperature', 'temperature must be a number'],
      ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], user_id: 42 }, 'user_id', 'user_id must be a string'],
    ])('POST %s %j says what is wrong', async (url, body, param, message) => {
      const answer = await send(t, workspace, 'POST', url, JSON.stringify(body));
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatchObject({ type: 'bad_request', param, message });
    });

    it('says q is missing from a search without q', async () => {
      const answer = await send(t, workspace, 'GET', '/v1/conversations/search');
      expect(answer.body.error).toMatchObject({ param: 'q', message: 'q must be a string: the text to search for' });
    });
  });

  describe('bodies that are not JSON', () => {
    async function conversationCount(): Promise<number> {
      return (await send(t, workspace, 'GET', '/v1/conversations/stats')).body.data.totals.conversations;
    }

    it.each([
      ['POST', '/v1/conversations', 'text/plain'],
      ['POST', '/v1/conversations', 'application/x-www-form-urlencoded'],
      ['PATCH', '/v1/conversations/CONVERSATION', 'text/plain'],
      ['POST', '/v1/chat/completions', 'text/plain'],
    ])('refuses %s %s with a %s body: 415, and nothing is created', async (method, url, contentType) => {
      const before = await conversationCount();
      const answer = await send(t, workspace, method, url.replace('CONVERSATION', conversationId), '{"title": "x"}', contentType);
      expect(answer.status).toBe(415);
      expect(answer.body).toEqual({
        error: { type: 'bad_request', message: expect.stringContaining('application/json'), code: 'unsupported_media_type', param: null },
      });
      expect(await conversationCount()).toBe(before);
    });

    it('still accepts a POST without a body, and JSON with a charset', async () => {
      expect((await send(t, workspace, 'POST', '/v1/conversations')).status).toBe(200);
      const answer = await send(t, workspace, 'POST', '/v1/conversations', '{"title": "ok"}', 'application/json; charset=utf-8');
      expect(answer.status).toBe(200);
      expect(answer.body.title).toBe('ok');
    });
  });
});

/**
 * An embedded PostgreSQL of this test's own, in a child process: the package is ESM-only and
 * cannot be imported inside jest. It uses the built `openEmbeddedPostgres` (npm test builds
 * first) and stops its server when told on stdin.
 */
class OwnPostgres {
  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    private readonly dataDir: string,
    private readonly lines: AsyncIterator<string>,
    readonly url: string,
  ) {}

  static async start(): Promise<OwnPostgres> {
    const module = path.resolve(__dirname, '../dist/src/database/embedded-postgres.js');
    if (!existsSync(module)) throw new Error(`${module} is missing: run "npm run -s build" first`);
    const dataDir = await mkdtemp(path.join(tmpdir(), 'acs-db-down-'));
    // Traversable by the `postgres` user the package runs the server as under root.
    await chmod(dataDir, 0o755);
    const script = `
      const { openEmbeddedPostgres } = require(${JSON.stringify(module)});
      openEmbeddedPostgres({ dataDir: process.argv[1], database: 'acs_db_down' }).then((db) => {
        console.log(db.url);
        process.stdin.once('data', () => db.stop().then(() => console.log('stopped'), () => console.log('stop failed')));
        process.stdin.once('end', () => db.stop().finally(() => process.exit(0)));
      }, (error) => { console.error(error); process.exit(1); });`;
    const child = spawn(process.execPath, ['-e', script, dataDir], { stdio: ['pipe', 'pipe', 'pipe'] });
    const lines = readLines(child);
    const first = await lines.next();
    if (first.done) throw new Error('the embedded PostgreSQL did not start');
    return new OwnPostgres(child, dataDir, lines, first.value);
  }

  /** Stops the server (a fast shutdown, as on a restart) and waits until it is down. */
  async stopServer(): Promise<void> {
    this.child.stdin.write('stop\n');
    expect((await this.lines.next()).value).toBe('stopped');
  }

  async close(): Promise<void> {
    if (this.child.exitCode === null) {
      const exited = new Promise((resolve) => this.child.once('exit', resolve));
      this.child.stdin.end();
      await exited;
    }
    await rm(this.dataDir, { recursive: true, force: true });
  }
}

async function* readLines(child: ChildProcessWithoutNullStreams): AsyncGenerator<string> {
  let buffered = '';
  for await (const chunk of child.stdout) {
    buffered += String(chunk);
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      yield buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
    }
  }
}

describe('the database down', () => {
  let database: OwnPostgres;
  let t: TestApp;
  let workspace: TestWorkspace;
  let freshKey: string;

  beforeAll(async () => {
    database = await OwnPostgres.start();
    await runMigrations(database.url);
    t = await startTestApp({ databaseUrl: database.url });
    workspace = await t.createWorkspace();
    // Made now, used only once the database is gone: no process cache knows it.
    freshKey = (await t.app.get(ApiKeysService).create(workspace.id, 'never used')).apiKey;
    expect((await send(t, workspace, 'GET', '/v1/wallet')).status).toBe(200);
    await database.stopServer();
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await database?.close();
  });

  function expectUnavailable(answer: { status: number; headers: Headers; body: unknown }) {
    expect({ status: answer.status, retryAfter: answer.headers.get('retry-after'), body: answer.body }).toEqual({
      status: 503,
      retryAfter: '5',
      body: {
        error: { type: 'service_unavailable', message: expect.stringMatching(/database/), code: 'database_unavailable', param: null },
      },
    });
    expect(JSON.stringify(answer.body)).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|postgres|terminat/i);
  }

  it.each([
    ['GET', '/v1/wallet', undefined],
    ['GET', '/v1/conversations', undefined],
    ['GET', '/v1/usage/recent', undefined],
    ['POST', '/v1/conversations', '{"title": "t"}'],
    ['POST', '/v1/chat/completions', chatBody()],
    ['POST', '/v1/chat/completions', chatBody({ stream: true })],
  ])('answers %s %s with 503 service_unavailable and Retry-After', async (method, url, body) => {
    expectUnavailable(await send(t, workspace, method, url, body));
  });

  it('answers 503 to a key that must be looked up in the database', async () => {
    const response = await fetch(`${t.baseUrl}/v1/models`, { headers: { Authorization: `Bearer ${freshKey}` } });
    expectUnavailable({ status: response.status, headers: response.headers, body: await response.json() });
  });

  it('is an SDK error with status 503', async () => {
    const error = await workspace.client.get('/conversations').catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
  });
});

describe('which database failures mean "unavailable"', () => {
  const failureOf = (promise: Promise<unknown>) => promise.then(() => null, (error: unknown) => error);
  let url: string;
  beforeAll(async () => {
    url = await createTestDatabase();
  });

  it('a connection the server ends (a shutdown or restart, 57P01) and a query on it afterwards', async () => {
    const victim = new Client({ connectionString: url });
    const admin = new Client({ connectionString: url });
    victim.on('error', () => undefined);
    await Promise.all([victim.connect(), admin.connect()]);
    try {
      const pid = (await victim.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      const sleeping = failureOf(victim.query('SELECT pg_sleep(30)'));
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      const terminated = await sleeping;
      expect(terminated).toMatchObject({ code: '57P01' });
      expect(isDatabaseUnavailable(terminated)).toBe(true);
      expect(isDatabaseUnavailable(await failureOf(victim.query('SELECT 1')))).toBe(true);
    } finally {
      await Promise.all([victim.end().catch(() => undefined), admin.end()]);
    }
  });

  it('a transaction whose connection the server ends: a savepoint throws the loss instead of hiding it, and later statements count as unavailable too', async () => {
    const dataSource = await new DataSource({ type: 'postgres', url, poolSize: 2, logging: false }).initialize();
    const admin = new Client({ connectionString: url });
    await admin.connect();
    try {
      const failure = await failureOf(
        dataSource.transaction(async (manager) => {
          const [{ pid }] = (await manager.query('SELECT pg_backend_pid() AS pid')) as { pid: number }[];
          const refused = await inSavepoint(manager, async () => {
            const sleeping = manager.query('SELECT pg_sleep(30)');
            // It fails while the terminate below is awaited: handled now, so that the failure
            // is not an unhandled rejection for that moment (jest fails the test on one).
            sleeping.catch(() => undefined);
            // Ended while it runs a statement, as a stop under load finds it.
            for (let i = 0; i < 200; i++) {
              const [{ state }] = (await admin.query('SELECT state FROM pg_stat_activity WHERE pid = $1', [pid])).rows as { state: string }[];
              if (state === 'active') break;
              await new Promise((resolve) => setTimeout(resolve, 10));
            }
            await admin.query('SELECT pg_terminate_backend($1)', [pid]);
            await sleeping;
          });
          // Not reached: a lost connection is no refusal to carry on past.
          return refused;
        }),
      );
      // The connection's own error, not the rollback's on the released runner.
      expect((failure as Error).name).not.toBe('QueryRunnerProviderAlreadyReleasedError');
      expect(failure).toMatchObject({ driverError: { code: '57P01' } });
      expect(isDatabaseUnavailable(failure)).toBe(true);
      // TypeORM released the runner on the connection's error: what a later statement on it throws.
      const released = await failureOf(
        dataSource.transaction(async (manager) => {
          await manager.queryRunner!.release();
          await manager.query('SELECT 1');
        }),
      );
      expect(released).toMatchObject({ name: 'QueryRunnerProviderAlreadyReleasedError' });
      expect(isDatabaseUnavailable(released)).toBe(true);
    } finally {
      await Promise.all([dataSource.destroy(), admin.end()]);
    }
  });

  it('a prepared statement that fails keeps its pooled connection; one after the data source is destroyed counts as unavailable', async () => {
    const dataSource = await new DataSource({ type: 'postgres', url, poolSize: 1, logging: false }).initialize();
    const pid = async () => (await preparedRows<{ pid: number }>(dataSource.manager, 'test-pid', 'SELECT pg_backend_pid() AS pid', []))[0].pid;
    try {
      const before = await pid();
      const refused = await failureOf(preparedRows(dataSource.manager, 'test-int', 'SELECT $1::int AS n', ['many']));
      expect(refused).toMatchObject({ code: '22P02' });
      expect(isDatabaseUnavailable(refused)).toBe(false);
      // The same connection (a closed one would have taken its prepared statements with it).
      expect(await pid()).toBe(before);
    } finally {
      await dataSource.destroy();
    }
    const afterDestroy = await failureOf(pid());
    expect(afterDestroy).toBeInstanceOf(Error);
    expect(isDatabaseUnavailable(afterDestroy)).toBe(true);
  });

  it('a port nobody listens on, but not a query that fails on a working database', async () => {
    const working = new Client({ connectionString: url });
    await working.connect();
    try {
      expect(isDatabaseUnavailable(await failureOf(working.query('SELECT * FROM no_such_table')))).toBe(false);
      expect(isDatabaseUnavailable(await failureOf(working.query("SELECT 'x'::int")))).toBe(false);
    } finally {
      await working.end();
    }
    const nowhere = new URL(url);
    nowhere.port = '1';
    expect(isDatabaseUnavailable(await failureOf(new Client({ connectionString: nowhere.toString() }).connect()))).toBe(true);
  });
});
