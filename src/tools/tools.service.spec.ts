import { Logger } from '@nestjs/common';
import { loadConfig } from '../config/app-config';
import type { FunctionTool } from '../providers/provider-adapter';
import { SourceList } from './citations';
import { RegisteredTool, ServerTool, ToolArgumentsError, ToolCallError, ToolContext, ToolPriceKey } from './server-tool';
import { ToolsService } from './tools.service';

/** The configured prices: file_search 100 millicents a call, web_search 1,000. */
const config = { ...loadConfig({}), toolPrices: { file_search: 100, web_search: 1_000 } };

/** A tool whose behaviour each test sets; it records the contexts it ran with. */
function fakeTool(
  name: string,
  options: { price?: ToolPriceKey; aliases?: string[]; maxResults?: number; run?: (args: string, context: ToolContext) => Promise<string> } = {},
) {
  const contexts: ToolContext[] = [];
  const definition: FunctionTool = { type: 'function', function: { name, parameters: { type: 'object', properties: {} } } };
  const tool: ServerTool = {
    definition,
    defaultMaxResults: options.maxResults ?? 5,
    run: async (args, context) => {
      contexts.push(context);
      return options.run ? options.run(args, context) : `${name} ran with ${args}`;
    },
  };
  const registered: RegisteredTool = {
    descriptor: { name, label: `${name}: a switch`, help: `What ${name} does.`, price: options.price ?? 'file_search', responsesAliases: options.aliases },
    tool,
  };
  return { registered, tool, contexts };
}
const toolsOf = (...fakes: Array<{ registered: RegisteredTool }>) => new ToolsService(fakes.map((fake) => fake.registered), config);

const assistant = (tools: Array<{ type: string; max_results?: number }>) => ({ id: 'assistant-1', tools });
const call = (name: string, args = '{}') => ({ id: 'call_1', name, arguments: args });
const live = () => new AbortController().signal;
const sources = new SourceList();

describe('ToolsService', () => {
  let warnings: jest.SpyInstance;
  beforeEach(() => {
    warnings = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => jest.restoreAllMocks());

  it('refuses two tools of one name at start', () => {
    expect(() => toolsOf(fakeTool('echo'), fakeTool('echo'))).toThrow('Two server tools are named echo.');
  });

  it('knows the registered names', () => {
    const tools = toolsOf(fakeTool('a'), fakeTool('b'));
    expect(tools.names()).toEqual(['a', 'b']);
    expect(tools.isRegistered('b')).toBe(true);
    expect(tools.isRegistered('c')).toBe(false);
  });

  it('describes the registered tools in their order, for the dashboard', () => {
    const tools = toolsOf(fakeTool('b'), fakeTool('a', { price: 'web_search' }));
    expect(tools.descriptors()).toEqual([
      { name: 'b', label: 'b: a switch', help: 'What b does.', price: 'file_search', responsesAliases: undefined },
      { name: 'a', label: 'a: a switch', help: 'What a does.', price: 'web_search', responsesAliases: undefined },
    ]);
  });

  it("maps the Responses API's hosted tool types, each tool's name and its aliases, to the tool", () => {
    const tools = toolsOf(fakeTool('search', { aliases: ['search_preview', 'search_2025'] }), fakeTool('lookup'));
    expect([...tools.hostedToolTypes()]).toEqual([
      ['search', 'search'],
      ['search_preview', 'search'],
      ['search_2025', 'search'],
      ['lookup', 'lookup'],
    ]);
  });

  it('refuses at start a Responses tool type that would name two tools', () => {
    expect(() => toolsOf(fakeTool('search', { aliases: ['lookup'] }), fakeTool('lookup'))).toThrow(
      'The Responses tool type lookup names two server tools: search and lookup.',
    );
  });

  it("offers the definitions of the assistant's registered tools, in the assistant's order", () => {
    const a = fakeTool('a');
    const b = fakeTool('b');
    const tools = toolsOf(a, b);
    expect(tools.definitions([{ type: 'b' }, { type: 'gone' }, { type: 'a' }])).toEqual([b.tool.definition, a.tool.definition]);
    expect(tools.definitions([])).toEqual([]);
  });

  it("treats a call as a server call only for a registered tool the assistant offers", () => {
    const tools = toolsOf(fakeTool('a'), fakeTool('b'));
    const settings = [{ type: 'a' }, { type: 'gone' }];
    expect(tools.isServerTool('a', settings)).toBe(true);
    expect(tools.isServerTool('b', settings)).toBe(false);
    expect(tools.isServerTool('gone', settings)).toBe(false);
    expect(tools.isServerTool(undefined, settings)).toBe(false);
  });

  it('holds for the dearest of the offered tools, each priced by the configured price it names', () => {
    const tools = toolsOf(fakeTool('cheap', { price: 'file_search' }), fakeTool('other', { price: 'file_search' }), fakeTool('dear', { price: 'web_search' }));
    expect(tools.maxPriceMicros([{ type: 'cheap' }, { type: 'dear' }])).toBe(1_000_000_000n);
    expect(tools.maxPriceMicros([{ type: 'cheap' }, { type: 'other' }])).toBe(100_000_000n);
    expect(tools.maxPriceMicros([])).toBe(0n);
  });

  it('runs the named tool with the assistant, its max_results or the default, and the signal; a call that returns costs the price', async () => {
    const a = fakeTool('a', { price: 'web_search', maxResults: 7 });
    const b = fakeTool('b');
    const tools = toolsOf(a, b);
    const signal = live();
    const host = assistant([{ type: 'a' }, { type: 'b', max_results: 2 }]);

    expect(await tools.run(call('a', '{"x":1}'), host, signal, sources)).toEqual({ content: 'a ran with {"x":1}', costMicros: 1_000_000_000n, ran: true, results: [] });
    expect(a.contexts).toEqual([{ assistant: host, maxResults: 7, settings: { type: 'a' }, signal, sources }]);
    await tools.run(call('b'), host, signal, sources);
    expect(b.contexts[0].maxResults).toBe(2);
  });

  it('tells the model about arguments that do not fit, free and without a warning', async () => {
    const tools = toolsOf(
      fakeTool('a', {
        run: async () => {
          throw new ToolArgumentsError('a needs {"x": number}.');
        },
      }),
  );
    expect(await tools.run(call('a'), assistant([{ type: 'a' }]), live(), sources)).toEqual({ content: 'a needs {"x": number}.', costMicros: 0n, ran: false, results: [] });
    expect(warnings).not.toHaveBeenCalled();
  });

  it("passes a ToolCallError's message to the model, free, and warns the operator", async () => {
    const tools = toolsOf(
      fakeTool('a', {
        run: async () => {
          throw new ToolCallError('a failed: timeout');
        },
      }),
  );
    expect(await tools.run(call('a'), assistant([{ type: 'a' }]), live(), sources)).toEqual({
      content: 'a failed: timeout. Answer without it, or say that you could not look it up.',
      costMicros: 0n,
      ran: false,
      results: [],
    });
    expect(warnings).toHaveBeenCalledWith('a failed for assistant assistant-1: a failed: timeout');
  });

  it("keeps any other error's message from the model", async () => {
    const tools = toolsOf(
      fakeTool('a', {
        run: async () => {
          throw new Error('connection refused by 10.0.0.7');
        },
      }),
  );
    const outcome = await tools.run(call('a'), assistant([{ type: 'a' }]), live(), sources);
    expect(outcome).toEqual({ content: 'a failed. Answer without it, or say that you could not look it up.', costMicros: 0n, ran: false, results: [] });
    expect(warnings).toHaveBeenCalledWith('a failed for assistant assistant-1: connection refused by 10.0.0.7');
  });

  it('lets the error through when the request was aborted', async () => {
    const controller = new AbortController();
    const aborted = new Error('aborted');
    const tools = toolsOf(
      fakeTool('a', {
        run: async () => {
          controller.abort();
          throw aborted;
        },
      }),
  );
    await expect(tools.run(call('a'), assistant([{ type: 'a' }]), controller.signal, sources)).rejects.toBe(aborted);
  });

  it('answers a call of a tool that is not registered (an assistant saved before it was removed) without running anything', async () => {
    const tools = toolsOf(fakeTool('a'));
    expect(await tools.run(call('gone'), assistant([{ type: 'gone' }]), live(), sources)).toEqual({ content: 'gone is not available.', costMicros: 0n, ran: false, results: [] });
  });
});
