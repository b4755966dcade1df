import { DynamicModule, Module, ModuleMetadata } from '@nestjs/common';
import { registeredTools, SERVER_TOOLS, ServerToolClass } from './server-tool';
import { ToolsService } from './tools.service';

export interface ServerToolsOptions {
  /** The tool classes, each provided here and all of them together under SERVER_TOOLS. */
  tools: readonly ServerToolClass[];
  /** The modules whose services the tools need (web search, documents). */
  imports?: ModuleMetadata['imports'];
}

/**
 * Server tools as strategies: `ToolsModule.register({ tools, imports })` provides the tool
 * classes, gathers them with their descriptors under one token, and exports the
 * `ToolsService` that runs them by name and describes them to the dashboard and the
 * Responses API. The module that registers them (the assistants module, which knows every
 * tool an assistant can offer) re-exports it. This folder depends on no tool's backend.
 */
@Module({})
export class ToolsModule {
  static register({ tools, imports = [] }: ServerToolsOptions): DynamicModule {
    return {
      module: ToolsModule,
      imports,
      providers: [...tools, { provide: SERVER_TOOLS, useFactory: registeredTools(tools), inject: [...tools] }, ToolsService],
      exports: [ToolsService],
    };
  }
}
