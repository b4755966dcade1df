import { Inject, Injectable, Logger } from '@nestjs/common';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import type { FunctionTool } from '../providers/provider-adapter';
import { MicroMillicents, microsOf } from '../wallet/cost';
import { tracing } from '../telemetry/tracing';
import type { CitedSource, SourceList } from './citations';
import {
  RegisteredTool,
  SERVER_TOOLS,
  ServerToolDescriptor,
  ToolArgumentsError,
  ToolCallError,
  ToolHost,
  ToolSettings,
} from './server-tool';

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
  /** The results the tool numbered for the answer to cite (empty when it found none or could not run). */
  results?: CitedSource[];
}

/** A registered tool with the configured price its descriptor names. */
interface PricedTool extends RegisteredTool {
  readonly priceMicros: MicroMillicents;
}

/**
 * The registered server tools (`SERVER_TOOLS`), found by name: their definitions for the
 * model, their prices for holds, running a call, and their descriptors for whoever lists
 * them (the dashboard's switches, the Responses API's hosted tools). Knows no tool in particular.
 */
@Injectable()
export class ToolsService {
  private readonly logger = new Logger('Tools');
  private readonly byName = new Map<string, PricedTool>();
  /** The Responses API's hosted tool types, each tool's name and aliases, to the tool's name. */
  private readonly byHostedType = new Map<string, string>();

  constructor(@Inject(SERVER_TOOLS) tools: readonly RegisteredTool[], @InjectConfig() config: AppConfig) {
    for (const { descriptor, tool } of tools) {
      const { name } = descriptor;
      if (this.byName.has(name)) throw new Error(`Two server tools are named ${name}.`);
      this.byName.set(name, { descriptor, tool, priceMicros: microsOf(config.toolPrices[descriptor.price]) });
    }
    for (const { name, responsesAliases = [] } of this.descriptors()) {
      for (const type of [name, ...responsesAliases]) {
        const taken = this.byHostedType.get(type);
        if (taken !== undefined) throw new Error(`The Responses tool type ${type} names two server tools: ${taken} and ${name}.`);
        this.byHostedType.set(type, name);
      }
    }
  }

  /** The names an assistant's tool settings may use, in the order of registration. */
  names(): string[] {
    return [...this.byName.keys()];
  }

  /** What each registered tool says of itself, in the order of registration. */
  descriptors(): ServerToolDescriptor[] {
    return [...this.byName.values()].map((registered) => registered.descriptor);
  }

  /** The Responses API's hosted tool types (each tool's name and its aliases), to the name of the tool that serves them. */
  hostedToolTypes(): ReadonlyMap<string, string> {
    return this.byHostedType;
  }

  isRegistered(name: string): boolean {
    return this.byName.has(name);
  }

  definitions(tools: readonly ToolSettings[]): FunctionTool[] {
    return this.registered(tools).map((registered) => registered.tool.definition);
  }

  /** Whether the model's call of `name` is one of these tools, to be run here rather than returned to the client. */
  isServerTool(name: string | undefined, tools: readonly ToolSettings[]): name is string {
    return name !== undefined && this.byName.has(name) && tools.some((tool) => tool.type === name);
  }

  /** The most a call of these tools can cost, for holds. */
  maxPriceMicros(tools: readonly ToolSettings[]): MicroMillicents {
    return this.registered(tools).reduce((max, { priceMicros }) => (priceMicros > max ? priceMicros : max), 0n);
  }

  /**
   * Runs one call. Never throws for a tool's own failure: the model is told what went wrong
   * in the tool message (and may answer without it), and a call that could not run is free.
   * Throws only when `signal` fired.
   */
  run(call: ServerToolCall, assistant: ToolHost, signal: AbortSignal, sources: SourceList): Promise<ToolOutcome> {
    return tracing.toolCall(call.name, call.id, () => this.runCall(call, assistant, signal, sources), (outcome) => outcome.ran);
  }

  private async runCall(call: ServerToolCall, assistant: ToolHost, signal: AbortSignal, sources: SourceList): Promise<ToolOutcome> {
    const registered = this.byName.get(call.name);
    if (!registered) return { content: `${call.name} is not available.`, costMicros: 0n, ran: false, results: [] };
    const settings = assistant.tools.find((candidate) => candidate.type === call.name) ?? { type: call.name };
    try {
      const run = await registered.tool.run(call.arguments, {
        assistant,
        maxResults: settings.max_num_results ?? settings.max_results ?? registered.tool.defaultMaxResults,
        settings,
        signal,
        sources,
      });
      const { content, results } = typeof run === 'string' ? { content: run, results: [] } : run;
      return { content, costMicros: registered.priceMicros, ran: true, results };
    } catch (error) {
      if (error instanceof ToolArgumentsError) return { content: error.message, costMicros: 0n, ran: false, results: [] };
      if (signal.aborted) throw error;
      // A ToolCallError's message is written for the model; any other error's is not.
      const reason = error instanceof ToolCallError ? error.message : `${call.name} failed`;
      this.logger.warn(`${call.name} failed for assistant ${assistant.id}: ${error instanceof Error ? error.message : String(error)}`);
      return { content: `${reason}. Answer without it, or say that you could not look it up.`, costMicros: 0n, ran: false, results: [] };
    }
  }

  /** The registered tools among an assistant's settings, in their order. */
  private registered(tools: readonly ToolSettings[]): PricedTool[] {
    return tools.flatMap((settings) => this.byName.get(settings.type) ?? []);
  }
}
