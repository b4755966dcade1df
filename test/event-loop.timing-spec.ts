import { DataSource } from 'typeorm';
import { FakeGemini, startFakeGemini } from './fakes/fake-gemini';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';
import { randomWords } from './support/random-words';

/**
 * A request of megabytes of random words must not hold the event loop: counting its tokens
 * (the o200k tokenizer merges random words letter by letter) once froze every other request
 * for 22.7 s. The service runs in this process, so a blocked event loop delays these
 * `/health` probes too: the one timed assertion the hardening issue asks for.
 */
const HEALTH_BUDGET_MS = 200;

interface Probed {
  status: number;
  body: Record<string, any>;
  /** How long each `/health` probe sent while the request ran took to answer. */
  healthMs: number[];
}

/** Sends a chat request and, until it is answered, probes `/health` every 20 ms. */
async function chatWhileProbing(t: TestApp, workspace: TestWorkspace, body: unknown): Promise<Probed> {
  const json = JSON.stringify(body);
  let answered = false;
  const chat = fetch(`${t.baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${workspace.apiKey}`, 'content-type': 'application/json' },
    body: json,
  })
    .then(async (response) => ({ status: response.status, body: (await response.json()) as Record<string, any> }))
    .finally(() => (answered = true));
  const healthMs: number[] = [];
  while (!answered) {
    const sent = performance.now();
    const health = await fetch(`${t.baseUrl}/health`);
    await health.text();
    healthMs.push(performance.now() - sent);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return { ...(await chat), healthMs };
}

describe('a request of megabytes keeps the server responsive', () => {
  describe('on the simulator (no provider key: gemini-2.5-flash is simulated)', () => {
    let t: TestApp;
    let workspace: TestWorkspace;

    beforeAll(async () => {
      t = await startTestApp({ config: { llmSimulator: 'auto', simulatorWordDelayMs: 0 } });
      workspace = await t.createWorkspace({ balanceMillicents: 10_000_000 });
    });
    afterAll(() => t.close());

    it('refuses 9.5 MB of random words beyond the 1M-token context while /health answers within 200 ms, and charges nothing', async () => {
      const probed = await chatWhileProbing(t, workspace, {
        model: 'gemini-2.5-flash',
        messages: [{ role: 'user', content: randomWords(9_500_000, 1) }],
        max_tokens: 16,
      });
      expect(probed.status).toBe(400);
      expect(probed.body.error).toMatchObject({ type: 'bad_request', code: 'context_length_exceeded', param: 'messages' });
      expect(probed.healthMs.length).toBeGreaterThan(0);
      expect(Math.max(...probed.healthMs)).toBeLessThan(HEALTH_BUDGET_MS);
      expect(await walletInvariants(t.app.get(DataSource), workspace.id)).toMatchObject({ balance: 10_000_000, reserved: 0, holds: 0 });
    }, 120_000);

    it('answers 1.9 MB of random words that fit the context, counted and billed, while /health answers within 200 ms', async () => {
      const probed = await chatWhileProbing(t, workspace, {
        model: 'gemini-2.5-flash',
        messages: [{ role: 'user', content: randomWords(1_900_000, 2) }],
        max_tokens: 16,
      });
      expect(probed.status).toBe(200);
      // About one token per two characters of random words: counted in full, not estimated.
      expect(probed.body.usage.prompt_tokens).toBeGreaterThan(800_000);
      expect(probed.body.usage.prompt_tokens).toBeLessThan(1_000_000);
      // The count took long enough for several probes, and none of them waited.
      expect(probed.healthMs.length).toBeGreaterThan(5);
      expect(Math.max(...probed.healthMs)).toBeLessThan(HEALTH_BUDGET_MS);
      expect(probed.body.x_service.cost_millicents).toBeGreaterThan(0);
    }, 120_000);
  });

  describe('through the Google adapter to a fake Gemini API', () => {
    let gemini: FakeGemini;
    let t: TestApp;
    let workspace: TestWorkspace;

    beforeAll(async () => {
      gemini = await startFakeGemini({ apiKey: 'gemini-test-key' });
      t = await startTestApp({
        config: { providers: { google: { apiKey: 'gemini-test-key', baseUrl: gemini.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 },
      });
      workspace = await t.createWorkspace({ balanceMillicents: 10_000_000 });
    });
    afterAll(async () => {
      await t.close();
      await gemini.close();
    });

    it('sends 1.5 MB of random words upstream while /health answers within 200 ms', async () => {
      const text = randomWords(1_500_000, 3);
      gemini.script({ answer: { text: 'Read it all.', usage: { promptTokenCount: 700_000, candidatesTokenCount: 4 } } });
      const probed = await chatWhileProbing(t, workspace, {
        model: 'gemini-2.5-flash',
        messages: [{ role: 'user', content: text }],
        max_tokens: 16,
      });
      expect(probed.status).toBe(200);
      expect(probed.body.choices[0].message.content).toBe('Read it all.');
      expect(gemini.requests).toHaveLength(1);
      expect(gemini.requests[0].body?.contents?.[0]?.parts?.[0]?.text).toBe(text);
      expect(probed.healthMs.length).toBeGreaterThan(5);
      expect(Math.max(...probed.healthMs)).toBeLessThan(HEALTH_BUDGET_MS);
    }, 120_000);
  });
});

describe('text the tokenizer treats specially', () => {
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'auto', simulatorWordDelayMs: 0 } });
    workspace = await t.createWorkspace();
  });
  afterAll(() => t.close());

  it('counts <|endoftext|> and other special-token lookalikes in a message as plain text, plain and streamed', async () => {
    const content = 'Repeat after me: <|endoftext|> <|fim_prefix|><|endofprompt|>';
    const completion = await workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content }] });
    expect(completion.choices[0].message.content).toContain('<|endoftext|>');
    expect(completion.usage!.prompt_tokens).toBeGreaterThan(10);

    const stream = await workspace.client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toContain('<|endoftext|>');
  });
});
