import OpenAI, { APIError } from 'openai';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import type { ServerToolType } from '../src/assistants/entities/assistant.entity';
import type { FunctionTool } from '../src/providers/provider-adapter';
import { ServerTool, ServerToolDescriptor, ToolArgumentsError, ToolContext } from '../src/tools/server-tool';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { signUp, textOf } from './support/dashboard-client';
import { startTestApp, testConfig, TestApp, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/**
 * Adding a server tool is one class and one registration line: a `calculator` registered
 * by this test alone goes through assistant validation, the tool loop, x_service, the usage
 * record and the wallet like the built-in tools, is a switch of the dashboard's assistant
 * editor, and is a hosted tool of the Responses API under its name and its alias.
 */

/** gpt-4o-mini prices, millicents per million tokens. */
const MINI = { input: 15_000, output: 60_000 };
/** The calculator is priced like a web search (it says so); WEB_SEARCH_PRICE_MILLICENTS is set to this. */
const CALCULATOR_PRICE = 250;

/** The whole tool: a class. It evaluates `a <op> b`, nothing more. */
class CalculatorTool implements ServerTool {
  static readonly descriptor: ServerToolDescriptor = {
    name: 'calculator',
    label: 'calculator: do arithmetic',
    help: 'The model can evaluate one arithmetic operation, at the price of a web search.',
    price: 'web_search',
    responsesAliases: ['calculator_preview'],
  };
  readonly defaultMaxResults = 1;
  readonly definition: FunctionTool = {
    type: 'function',
    function: {
      name: CalculatorTool.descriptor.name,
      description: 'Evaluates one arithmetic operation, such as "6 * 7".',
      parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
    },
  };
  readonly calls: Array<{ args: string; assistantId: string; maxResults: number }> = [];

  async run(args: string, { assistant, maxResults }: ToolContext): Promise<string> {
    this.calls.push({ args, assistantId: assistant.id, maxResults });
    const { expression } = JSON.parse(args) as { expression?: string };
    const match = /^\s*(-?\d+(?:\.\d+)?)\s*([-+*/])\s*(-?\d+(?:\.\d+)?)\s*$/.exec(expression ?? '');
    if (!match) throw new ToolArgumentsError('calculator needs arguments of the form {"expression": "<number> <+-*/> <number>"}.');
    const [a, b] = [Number(match[1]), Number(match[3])];
    const result = { '+': a + b, '-': a - b, '*': a * b, '/': a / b }[match[2] as '+' | '-' | '*' | '/'];
    return String(result);
  }
}

type XService = { cost_millicents: number; iterations: number; tools_used: string[]; generated_files: null; provider: string | null; deployment: string | null; attempts: number };
type Completion = OpenAI.Chat.ChatCompletion & { x_service: XService };

describe('a server tool added by one class and one registration line (calculator)', () => {
  let calculator: CalculatorTool;
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;
  let assistants: AssistantsService;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        toolPrices: { ...testConfig().toolPrices, web_search: CALCULATOR_PRICE },
      },
      // The registration line.
      serverTools: [CalculatorTool],
    });
    calculator = t.app.get(CalculatorTool);
    db = t.app.get(DataSource);
    assistants = t.app.get(AssistantsService);
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  const calculatorOnly = ['calculator' as ServerToolType];
  const calculatorCall = (expression: string, id = 'call_calc1') => ({
    kind: 'tool_calls' as const,
    calls: [{ id, name: 'calculator', arguments: JSON.stringify({ expression }) }],
  });
  const ask = async (workspace: TestWorkspace, assistantId: string, content: string) =>
    (await workspace.client.chat.completions.create({
      assistant_id: assistantId,
      messages: [{ role: 'user', content }],
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;
  const ledger = async (workspace: TestWorkspace) => {
    await t.settled(workspace.id);
    return db.query('SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at, type DESC', [
      workspace.id,
    ]);
  };

  it('accepts the registered tool in an assistant, beside a built-in one, and names it among the choices when refusing another', async () => {
    const workspace = await t.createWorkspace();
    const bot = await assistants.create(workspace.id, {
      name: 'Maths',
      model: 'gpt-4o-mini',
      tools: [...calculatorOnly, { type: 'file_search', max_results: 3 }],
    });
    expect(bot.tools).toEqual([{ type: 'calculator' }, { type: 'file_search', max_results: 3 }]);

    const refused = await assistants
      .create(workspace.id, { name: 'Abacus', model: 'gpt-4o-mini', tools: ['abacus' as ServerToolType] })
      .catch((e: unknown) => e);
    expect(refused).toMatchObject({
      param: 'tools.0',
      message: 'tools.0 must be one of web_search, file_search, calculator (got "abacus").',
    });
  });

  it('runs in the tool loop: the model calls it, the service runs it, the answer comes back, x_service reports it and it is charged its price', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
    const bot = await assistants.create(workspace.id, { name: 'Calculator bot', model: 'gpt-4o-mini', tools: [...calculatorOnly, 'file_search'] });
    upstream.script(
      { ...calculatorCall('6 * 7'), usage: { prompt_tokens: 200, completion_tokens: 50 } },
      { kind: 'text', text: 'Six times seven is 42.', usage: { prompt_tokens: 400, completion_tokens: 50 } },
    );
    const before = upstream.requests.length;
    const calls = calculator.calls.length;

    const completion = await ask(workspace, bot.id, 'What is six times seven?');

    expect(completion.choices[0]).toMatchObject({ message: { content: 'Six times seven is 42.' }, finish_reason: 'stop' });
    expect(completion.choices[0].message.tool_calls).toBeUndefined();
    // 600 input and 100 output tokens: 9 + 6 = 15 millicents, and the calculator's price.
    const llm = (600 * MINI.input + 100 * MINI.output) / 1e6;
    expect(completion.x_service).toEqual({ cost_millicents: llm + CALCULATOR_PRICE, iterations: 2, tools_used: ['calculator'], generated_files: null, provider: 'openai', deployment: 'openai', attempts: 2 });

    // The model was offered both tools, the calculator as the class defines it.
    const offered = upstream.requests[before].body.tools as Array<{ function: { name: string; parameters: unknown } }>;
    expect(offered.map((tool) => tool.function.name)).toEqual(['calculator', 'file_search']);
    expect(offered[0].function.parameters).toEqual(calculator.definition.function.parameters);
    // The tool ran for this assistant with its default result count, and its answer went back to the model.
    expect(calculator.calls.slice(calls)).toEqual([{ args: '{"expression":"6 * 7"}', assistantId: bot.id, maxResults: 1 }]);
    expect((upstream.requests[before + 1].body.messages as unknown[]).slice(-2)).toEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_calc1', type: 'function', function: { name: 'calculator', arguments: '{"expression":"6 * 7"}' } }] },
      { role: 'tool', tool_call_id: 'call_calc1', content: '42' },
    ]);

    await t.settled(workspace.id);
    const [record] = await db.query(
      'SELECT tools_used, tool_cost_millicents, total_cost_millicents, charged_millicents, iterations FROM usage_records WHERE workspace_id = $1',
      [workspace.id],
    );
    expect(record).toEqual({
      tools_used: ['calculator'],
      tool_cost_millicents: CALCULATOR_PRICE.toFixed(6),
      total_cost_millicents: (llm + CALCULATOR_PRICE).toFixed(6),
      charged_millicents: String(llm + CALCULATOR_PRICE),
      iterations: 2,
    });
    expect(await ledger(workspace)).toEqual([
      { type: 'topup', amount: 100_000 },
      { type: 'usage', amount: -(llm + CALCULATOR_PRICE) },
    ]);
    await t.quiet(workspace.id);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 100_000 - llm - CALCULATOR_PRICE, reserved: 0, ledger: 100_000 - llm - CALCULATOR_PRICE, holds: 0 });
  });

  it('streams the same loop, with x_service on the last chunk', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
    const bot = await assistants.create(workspace.id, { name: 'Streaming calculator', model: 'gpt-4o-mini', tools: calculatorOnly });
    upstream.script(
      { ...calculatorCall('1.5 + 2', 'call_calc2'), usage: { prompt_tokens: 200, completion_tokens: 50 } },
      { kind: 'text', text: 'It is 3.5.', usage: { prompt_tokens: 400, completion_tokens: 50 } },
    );
    const stream = await workspace.client.chat.completions.create({
      assistant_id: bot.slug,
      messages: [{ role: 'user', content: '1.5 + 2?' }],
      stream: true,
      stream_options: { include_usage: true },
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    const chunks: Array<OpenAI.Chat.ChatCompletionChunk & { x_service?: XService }> = [];
    for await (const chunk of stream) chunks.push(chunk);

    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('It is 3.5.');
    expect(chunks.some((c) => c.choices[0]?.delta?.tool_calls)).toBe(false);
    expect((upstream.requests.at(-1)!.body.messages as Array<{ content: string }>).at(-1)!.content).toBe('3.5');
    const llm = (600 * MINI.input + 100 * MINI.output) / 1e6;
    expect(chunks.at(-1)!.x_service).toEqual({ cost_millicents: llm + CALCULATOR_PRICE, iterations: 2, tools_used: ['calculator'], generated_files: null, provider: 'openai', deployment: 'openai', attempts: 2 });
    expect(await t.app.get(WalletService).balance(workspace.id)).toMatchObject({ balanceMillicents: 100_000 - llm - CALCULATOR_PRICE, reservedMillicents: 0 });
  });

  it('tells the model when its arguments do not fit, and does not charge the call', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
    const bot = await assistants.create(workspace.id, { name: 'Strict calculator', model: 'gpt-4o-mini', tools: calculatorOnly });
    upstream.script(
      { ...calculatorCall('the square root of two', 'call_calc3'), usage: { prompt_tokens: 200, completion_tokens: 50 } },
      { kind: 'text', text: 'I cannot compute that.', usage: { prompt_tokens: 400, completion_tokens: 50 } },
    );

    const completion = await ask(workspace, bot.id, 'Square root of two?');

    expect((upstream.requests.at(-1)!.body.messages as Array<{ role: string; content: string }>).at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_calc3',
      content: 'calculator needs arguments of the form {"expression": "<number> <+-*/> <number>"}.',
    });
    const llm = (600 * MINI.input + 100 * MINI.output) / 1e6;
    expect(completion.x_service).toEqual({ cost_millicents: llm, iterations: 2, tools_used: [], generated_files: null, provider: 'openai', deployment: 'openai', attempts: 2 });
    expect(await ledger(workspace)).toEqual([
      { type: 'topup', amount: 100_000 },
      { type: 'usage', amount: -llm },
    ]);
  });

  describe("the dashboard's assistant editor", () => {
    it('offers the registered tool as a switch with its label and help, beside the built-in ones in the order of their names', async () => {
      const owner = await signUp(t.baseUrl, { email: 'cal@example.com', name: 'Cal Culator' });
      const page = await owner.client.get(`/w/${owner.workspaceId}/assistants/new`);
      expect(page.status).toBe(200);
      expect([...page.html.matchAll(/role="switch" id="tool-[a-z-]+" name="tool_([a-z_]+)"/g)].map((match) => match[1])).toEqual([
        'calculator',
        'file_search',
        'web_search',
      ]);
      const field = page.html.match(/<label for="tool-calculator">[\s\S]*?<small id="tool-calculator-help">[\s\S]*?<\/small>/);
      expect(field).not.toBeNull();
      expect(textOf(field![0])).toBe('calculator: do arithmetic The model can evaluate one arithmetic operation, at the price of a web search.');
    });

    it('stores the tool when the switch is on, and shows it on again', async () => {
      const owner = await signUp(t.baseUrl, { email: 'abacus@example.com', name: 'Ab Acus' });
      const base = `/w/${owner.workspaceId}/assistants`;
      await owner.client.get(`${base}/new`);
      const created = await owner.client.post(base, {
        name: 'Abacus',
        slug: '',
        description: '',
        system_prompt: '',
        model: 'gpt-4o-mini',
        temperature: '',
        max_tokens: '',
        max_tool_iterations: '3',
        tool_calculator: 'on',
        tool_web_search: 'on',
      });
      expect(created.status).toBe(303);
      const id = created.location!.match(/assistants\/([0-9a-f-]{36})$/)![1];
      expect((await assistants.resolve(owner.workspaceId, id)).tools).toEqual([{ type: 'calculator' }, { type: 'web_search' }]);

      const editor = await owner.client.get(`${base}/${id}`);
      expect(editor.html).toMatch(/id="tool-calculator" name="tool_calculator" checked/);
      expect(editor.html).toMatch(/id="tool-file-search" name="tool_file_search" aria-describedby/);
    });
  });

  describe('the Responses API', () => {
    const respond = async (workspace: TestWorkspace, body: Record<string, unknown>) =>
      (await workspace.client.responses.create(body as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming)) as OpenAI.Responses.Response & {
        x_service: XService;
      };

    it.each([['calculator'], ['calculator_preview']])('runs the tool in the loop when a request names it as the hosted tool %s', async (type) => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const bot = await assistants.create(workspace.id, { name: `Responses ${type}`, model: 'gpt-4o-mini', tools: calculatorOnly });
      upstream.script(
        { ...calculatorCall('2 + 2', 'call_resp'), usage: { prompt_tokens: 200, completion_tokens: 50 } },
        { kind: 'text', text: 'Four.', usage: { prompt_tokens: 400, completion_tokens: 50 } },
      );
      const calls = calculator.calls.length;

      const response = await respond(workspace, { model: `assistant/${bot.slug}`, input: 'What is 2 + 2?', tools: [{ type }] });

      expect(response.output_text).toBe('Four.');
      expect(response.output.map((item) => item.type)).toEqual(['message']);
      const llm = (600 * MINI.input + 100 * MINI.output) / 1e6;
      expect(response.x_service).toMatchObject({ cost_millicents: llm + CALCULATOR_PRICE, iterations: 2, tools_used: ['calculator'] });
      expect(calculator.calls.slice(calls)).toEqual([{ args: '{"expression":"2 + 2"}', assistantId: bot.id, maxResults: 1 }]);
      expect((upstream.requests.at(-1)!.body.messages as unknown[]).at(-1)).toEqual({ role: 'tool', tool_call_id: 'call_resp', content: '4' });
    });

    it('refuses the tool for an assistant without it, and names it among the hosted tools it serves when refusing another', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      await assistants.create(workspace.id, { name: 'Plain', model: 'gpt-4o-mini' });
      const refusal = async (body: Record<string, unknown>) => {
        const error = await respond(workspace, body).then(
          () => new Error('expected the request to be refused'),
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(APIError);
        return { status: (error as APIError).status, error: (error as APIError).error };
      };

      expect(await refusal({ assistant_id: 'plain', input: 'Hi', tools: [{ type: 'calculator_preview' }] })).toMatchObject({
        status: 400,
        error: { code: 'tool_not_enabled', param: 'tools.0', message: "The assistant 'plain' has no calculator tool: add it in the assistant's settings, or leave this tool out." },
      });
      expect(await refusal({ model: 'gpt-4o-mini', input: 'Hi', tools: [{ type: 'abacus' }] })).toMatchObject({
        status: 400,
        error: {
          code: 'unsupported_tool',
          param: 'tools.0.type',
          message: 'tools.0: the hosted tool "abacus" is not available here. Function tools are, and an assistant\'s web_search, file_search and calculator.',
        },
      });
    });
  });
});
