import { Logger } from '@nestjs/common';
import type { FunctionTool } from '../providers/provider-adapter';
import { ServerTool, ToolArgumentsError, ToolCallError, ToolContext } from './server-tool';
import { ToolsService } from './tools.service';

/** A tool whose behaviour each test sets; it records the contexts it ran with. */
function fakeTool(name: string, options: { price?: number; maxResults?: number; run?: (args: string, context: ToolContext) => Promise<string> } = {}) {
  const contexts: ToolContext[] = [];
  const definition: FunctionTool = { type: 'function', function: { name, parameters: { type: 'object', properties: {} } } };
  const tool: ServerTool = {
    name,
    definition,
    defaultMaxResults: options.maxResults ?? 5,
    priceMillicents: options.price ?? 100,
    run: async (args, context) => {
      contexts.push(context);
      return options.run ? options.run(args, context) : `${name} ran with ${args}`;
    },
  };
  return { tool, contexts };
}

const assistant = (tools: Array<{ type: string; max_results?: number }>) => ({ id: 'assistant-1', tools });
const call = (name: string, args = '{}') => ({ id: 'call_1', name, arguments: args });
const live = () => new AbortController().signal;

describe('ToolsService', () => {
  let warnings: jest.SpyInstance;
  beforeEach(() => {
    warnings = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => jest.restoreAllMocks());

  it('refuses two tools of one name at start', () => {
    expect(() => new ToolsService([fakeTool('echo').tool, fakeTool('echo').tool])).toThrow('Two server tools are named echo.');
  });

  it('knows the registered names', () => {
    const tools = new ToolsService([fakeTool('a').tool, fakeTool('b').tool]);
    expect(tools.names()).toEqual(['a', 'b']);
    expect(tools.isRegistered('b')).toBe(true);
    expect(tools.isRegistered('c')).toBe(false);
  });

  it("offers the definitions of the assistant's registered tools, in the assistant's order", () => {
    const a = fakeTool('a');
    const b = fakeTool('b');
    const tools = new ToolsService([a.tool, b.tool]);
    expect(tools.definitions([{ type: 'b' }, { type: 'gone' }, { type: 'a' }])).toEqual([b.tool.definition, a.tool.definition]);
    expect(tools.definitions([])).toEqual([]);
  });

  it("treats a call as a server call only for a registered tool the assistant offers", () => {
    const tools = new ToolsService([fakeTool('a').tool, fakeTool('b').tool]);
    const settings = [{ type: 'a' }, { type: 'gone' }];
    expect(tools.isServerTool('a', settings)).toBe(true);
    expect(tools.isServerTool('b', settings)).toBe(false);
    expect(tools.isServerTool('gone', settings)).toBe(false);
    expect(tools.isServerTool(undefined, settings)).toBe(false);
  });

  it('holds for the dearest of the offered tools', () => {
    const tools = new ToolsService([fakeTool('cheap', { price: 100 }).tool, fakeTool('dear', { price: 1_000 }).tool, fakeTool('unused', { price: 5_000 }).tool]);
    expect(tools.maxPriceMicros([{ type: 'cheap' }, { type: 'dear' }])).toBe(1_000_000_000n);
    expect(tools.maxPriceMicros([{ type: 'cheap' }])).toBe(100_000_000n);
    expect(tools.maxPriceMicros([])).toBe(0n);
  });

  it('runs the named tool with the assistant, its max_results or the default, and the signal; a call that returns costs the price', async () => {
    const a = fakeTool('a', { price: 250, maxResults: 7 });
    const b = fakeTool('b');
    const tools = new ToolsService([a.tool, b.tool]);
    const signal = live();
    const host = assistant([{ type: 'a' }, { type: 'b', max_results: 2 }]);

    expect(await tools.run(call('a', '{"x":1}'), host, signal)).toEqual({ content: 'a ran with {"x":1}', costMicros: 250_000_000n, ran: true });
    expect(a.contexts).toEqual([{ assistant: host, maxResults: 7, signal }]);
    await tools.run(call('b'), host, signal);
    expect(b.contexts[0].maxResults).toBe(2);
  });

  it('tells the model about arguments that do not fit, free and without a warning', async () => {
    const tools = new ToolsService([
      fakeTool('a', {
        run: async () => {
          throw new ToolArgumentsError('a needs {"x": number}.');
        },
      }).tool,
    ]);
    expect(await tools.run(call('a'), assistant([{ type: 'a' }]), live())).toEqual({ content: 'a needs {"x": number}.', costMicros: 0n, ran: false });
    expect(warnings).not.toHaveBeenCalled();
  });

  it("passes a ToolCallError's message to the model, free, and warns the operator", async () => {
    const tools = new ToolsService([
      fakeTool('a', {
        run: async () => {
          throw new ToolCallError('a failed: timeout');
        },
      }).tool,
    ]);
    expect(await tools.run(call('a'), assistant([{ type: 'a' }]), live())).toEqual({
      content: 'a failed: timeout. Answer without it, or say that you could not look it up.',
      costMicros: 0n,
      ran: false,
    });
    expect(warnings).toHaveBeenCalledWith('a failed for assistant assistant-1: a failed: timeout');
  });

  it("keeps any other error's message from the model", async () => {
    const tools = new ToolsService([
      fakeTool('a', {
        run: async () => {
          throw new Error('connection refused by 10.0.0.7');
        },
      }).tool,
    ]);
    const outcome = await tools.run(call('a'), assistant([{ type: 'a' }]), live());
    expect(outcome).toEqual({ content: 'a failed. Answer without it, or say that you could not look it up.', costMicros: 0n, ran: false });
    expect(warnings).toHaveBeenCalledWith('a failed for assistant assistant-1: connection refused by 10.0.0.7');
  });

  it('lets the error through when the request was aborted', async () => {
    const controller = new AbortController();
    const aborted = new Error('aborted');
    const tools = new ToolsService([
      fakeTool('a', {
        run: async () => {
          controller.abort();
          throw aborted;
        },
      }).tool,
    ]);
    await expect(tools.run(call('a'), assistant([{ type: 'a' }]), controller.signal)).rejects.toBe(aborted);
  });

  it('answers a call of a tool that is not registered (an assistant saved before it was removed) without running anything', async () => {
    const tools = new ToolsService([fakeTool('a').tool]);
    expect(await tools.run(call('gone'), assistant([{ type: 'gone' }]), live())).toEqual({ content: 'gone is not available.', costMicros: 0n, ran: false });
  });
});
