import { Global, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { AppCreator } from '../../src/app.factory';
import { SERVER_TOOL_CLASSES } from '../../src/assistants/server-tools';
import { registeredTools, SERVER_TOOLS, type ServerToolClass } from '../../src/tools/server-tool';

/**
 * Builds the application with `extra` server tool classes registered after the built-in
 * ones, as if appended to SERVER_TOOL_CLASSES: the same root module, the classes provided
 * by a global module of their own (so that they get their dependencies as any tool does),
 * and the SERVER_TOOLS provider overridden with the longer list. Everything that reads the
 * registry (assistants, the tool loop, prices, the dashboard, the Responses API) sees them.
 * A test reaches a tool's instance with `app.get(TheToolClass)`.
 */
export function withServerTools(extra: readonly ServerToolClass[]): AppCreator {
  @Global()
  @Module({ providers: [...extra], exports: [...extra] })
  class ExtraServerToolsModule {}

  const classes = [...SERVER_TOOL_CLASSES, ...extra];
  return async (module, options, adapter) => {
    const testing = await Test.createTestingModule({ imports: [module, ExtraServerToolsModule] })
      .overrideProvider(SERVER_TOOLS)
      .useFactory({ factory: registeredTools(classes), inject: classes })
      .compile();
    return testing.createNestApplication<NestExpressApplication>(adapter, options);
  };
}
