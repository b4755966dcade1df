import OpenAI from 'openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/** `Idempotency-Key` on POST /v1/conversations: the chat route's semantics, through the same @Idempotent() interceptor. */
describe('conversations: Idempotency-Key', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());

  const create = (workspace: TestWorkspace, key: string, body: Record<string, unknown>) =>
    workspace.client.post('/conversations', { body, headers: { 'Idempotency-Key': key } }).withResponse();
  const count = async (workspace: TestWorkspace) =>
    ((await workspace.client.get('/conversations')) as { data: unknown[] }).data.length;
  const errorOf = (promise: Promise<unknown>) =>
    promise.then(
      () => null,
      (error: unknown) => error as InstanceType<typeof OpenAI.APIError>,
    );

  it('creates one conversation for the same key sent twice, and replays its body', async () => {
    const workspace = await t.createWorkspace();
    const body = { title: 'Refund', user_id: 'user_1', metadata: { channel: 'web' } };
    const first = await create(workspace, 'conv-once', body);
    const second = await create(workspace, 'conv-once', body);

    expect(first.response.status).toBe(200);
    expect(second.response.status).toBe(200);
    expect(first.response.headers.get('idempotent-replayed')).toBeNull();
    expect(second.response.headers.get('idempotent-replayed')).toBe('true');
    expect(second.data).toEqual(first.data);
    expect(await count(workspace)).toBe(1);
    // Without a key, every request creates.
    await workspace.client.post('/conversations', { body });
    expect(await count(workspace)).toBe(2);
  });

  it('refuses the same key with another body with 409, and keeps keys apart per workspace', async () => {
    const workspace = await t.createWorkspace();
    await create(workspace, 'conv-shared', { title: 'one' });
    expect(await errorOf(create(workspace, 'conv-shared', { title: 'two' }))).toMatchObject({
      status: 409,
      error: { type: 'conflict', code: 'idempotency_key_reused' },
    });
    const other = await t.createWorkspace();
    const theirs = await create(other, 'conv-shared', { title: 'two' });
    expect(theirs.response.headers.get('idempotent-replayed')).toBeNull();
    expect(await count(workspace)).toBe(1);
  });

  it('keeps a conversation key apart from a chat key, even for the same body', async () => {
    const workspace = await t.createWorkspace();
    const body = { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] };
    await workspace.client.chat.completions.create(body as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, {
      headers: { 'Idempotency-Key': 'chat-then-conversation' },
    });
    expect(await errorOf(create(workspace, 'chat-then-conversation', body))).toMatchObject({
      status: 409,
      error: { code: 'idempotency_key_reused' },
    });
  });

  it('frees the key of a refused request, so that the corrected retry runs', async () => {
    const workspace = await t.createWorkspace();
    expect(await errorOf(create(workspace, 'conv-fixed', { title: 42 }))).toMatchObject({ status: 400 });
    expect(await count(workspace)).toBe(0);
    const retry = await create(workspace, 'conv-fixed', { title: 'fixed' });
    expect(retry.response.headers.get('idempotent-replayed')).toBeNull();
    expect(await count(workspace)).toBe(1);
  });

  it('refuses a malformed key with 400', async () => {
    const workspace = await t.createWorkspace();
    expect(await errorOf(create(workspace, 'x'.repeat(300), {}))).toMatchObject({ status: 400 });
    expect(await count(workspace)).toBe(0);
  });

  it('documents the header on both routes', async () => {
    const document = (await (await fetch(`${t.baseUrl}/docs/openapi.json`)).json()) as {
      paths: Record<string, { post: { parameters?: Array<{ name: string; in: string }> } }>;
    };
    for (const path of ['/v1/chat/completions', '/v1/conversations']) {
      expect(document.paths[path].post.parameters).toEqual(
        expect.arrayContaining([expect.objectContaining({ name: 'Idempotency-Key', in: 'header' })]),
      );
    }
  });
});
