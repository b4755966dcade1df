import { Inject, Injectable, Logger } from '@nestjs/common';
import type { FunctionTool } from '../providers/provider-adapter';
import { MicroMillicents, microsOf } from '../wallet/cost';
import { SERVER_TOOLS, ServerTool, ToolArgumentsError, ToolCallError, ToolHost, ToolSettings } from './server-tool';

export interface ServerToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface ToolOutcome {
  /** The tool message content shown to the model: results, or why there are none. */
  content: string;
  /** What the call costs the caller: its price when it ran, nothing when it could not. */
  costMicros: MicroMillicents;
  ran: boolean;
}

/**
 * The registered server tools (`SERVER_TOOLS`), found by name: their definitions for the
 * model, their prices for holds, and running a call. Knows no tool in particular.
 */
@Injectable()
export class ToolsService {
  private readonly logger = new Logger('Tools');
  private readonly byName = new Map<string, ServerTool>();

  constructor(@Inject(SERVER_TOOLS) tools: readonly ServerTool[]) {
    for (const tool of tools) {
      if (this.byName.has(tool.name)) throw new Error(`Two server tools are named ${tool.name}.`);
      this.byName.set(tool.name, tool);
    }
  }

  /** The names an assistant's tool settings may use. */
  names(): string[] {
    return [...this.byName.keys()];
  }

  isRegistered(name: string): boolean {
    return this.byName.has(name);
  }

  definitions(tools: readonly ToolSettings[]): FunctionTool[] {
    return this.registered(tools).map((tool) => tool.definition);
  }

  /** Whether the model's call of `name` is one of these tools, to be run here rather than returned to the client. */
  isServerTool(name: string | undefined, tools: readonly ToolSettings[]): name is string {
    return name !== undefined && this.byName.has(name) && tools.some((tool) => tool.type === name);
  }

  /** The most a call of these tools can cost, for holds. */
  maxPriceMicros(tools: readonly ToolSettings[]): MicroMillicents {
    return this.registered(tools).reduce((max, tool) => {
      const price = microsOf(tool.priceMillicents);
      return price > max ? price : max;
    }, 0n);
  }

  /**
   * Runs one call. Never throws for a tool's own failure: the model is told what went wrong
   * in the tool message (and may answer without it), and a call that could not run is free.
   * Throws only when `signal` fired.
   */
  async run(call: ServerToolCall, assistant: ToolHost, signal: AbortSignal): Promise<ToolOutcome> {
    const tool = this.byName.get(call.name);
    if (!tool) return { content: `${call.name} is not available.`, costMicros: 0n, ran: false };
    const settings = assistant.tools.find((candidate) => candidate.type === call.name);
    try {
      const content = await tool.run(call.arguments, {
        assistant,
        maxResults: settings?.max_results ?? tool.defaultMaxResults,
        signal,
      });
      return { content, costMicros: microsOf(tool.priceMillicents), ran: true };
    } catch (error) {
      if (error instanceof ToolArgumentsError) return { content: error.message, costMicros: 0n, ran: false };
      if (signal.aborted) throw error;
      // A ToolCallError's message is written for the model; any other error's is not.
      const reason = error instanceof ToolCallError ? error.message : `${call.name} failed`;
      this.logger.warn(`${call.name} failed for assistant ${assistant.id}: ${error instanceof Error ? error.message : String(error)}`);
      return { content: `${reason}. Answer without it, or say that you could not look it up.`, costMicros: 0n, ran: false };
    }
  }

  /** The registered tools among an assistant's settings, in their order. */
  private registered(tools: readonly ToolSettings[]): ServerTool[] {
    return tools.flatMap((settings) => this.byName.get(settings.type) ?? []);
  }
}
