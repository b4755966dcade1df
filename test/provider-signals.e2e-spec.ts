import { Cancellation } from '../src/common/cancellation';
import { ModelsService } from '../src/models/models.service';
import type { ModelCall } from '../src/providers/provider-adapter';
import { ProvidersService } from '../src/providers/providers.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp } from './support/test-app';

/**
 * An upstream call is linked to its request's cancellation (the client leaving, the stop's
 * drain deadline) for as long as it runs, and no longer: every call of a request, each
 * iteration of a tool loop and each retry, adds a listener that must go when the call ends.
 */
describe('upstream calls and the cancellation of their request', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let providers: ProvidersService;
  let request: ModelCall;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({ config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off', upstreamMaxRetries: 1 } });
    providers = t.app.get(ProvidersService);
    const model = t.app.get(ModelsService).get('gpt-4o-mini');
    request = { model, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 16, extra: {} };
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  it('unlinks a completion when it ends, answered or failed after its retry', async () => {
    const client = new Cancellation();
    upstream.script({ kind: 'text', text: 'one' }, { kind: 'text', text: 'two' });
    await providers.complete(request, client);
    await providers.complete(request, client);
    expect(client.listenerCount).toBe(0);
    upstream.script({ kind: 'http_error', status: 500 }, { kind: 'http_error', status: 500 });
    await expect(providers.complete(request, client)).rejects.toBeDefined();
    expect(client.listenerCount).toBe(0);
  });

  it('keeps a stream linked while it is open, so that the client leaving still stops it, and unlinks it when it ends or is closed', async () => {
    const client = new Cancellation();
    upstream.script({ kind: 'text', text: 'one two three' });
    const read = await providers.openStream(request, client);
    expect(client.listenerCount).toBe(1);
    while (!(await read.rest.next()).done);
    expect(client.listenerCount).toBe(0);

    upstream.script({ kind: 'text', text: 'one two three' });
    const closed = await providers.openStream(request, client);
    // Closing aborts the upstream call, which its reader may report as an AbortError.
    await closed.rest.return?.().catch(() => undefined);
    expect(client.listenerCount).toBe(0);

    upstream.script({ kind: 'text', text: 'one two three four five', chunkDelayMs: 200 });
    const left = await providers.openStream(request, client);
    client.abort();
    await expect(left.rest.next()).rejects.toBeDefined();
    expect(client.listenerCount).toBe(0);
  });
});
