import { Test } from '@nestjs/testing';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { AppCreator } from '../../src/app.factory';
import { SERVER_TOOL_CLASSES } from '../../src/assistants/server-tools';
import { SERVER_TOOLS, type ServerTool } from '../../src/tools/server-tool';

/**
 * Builds the application with `extra` server tools registered beside the built-in ones:
 * the same root module, with the SERVER_TOOLS provider overridden to append them. In the
 * application itself a tool is added to SERVER_TOOL_CLASSES instead.
 */
export function withServerTools(extra: readonly ServerTool[]): AppCreator {
  return async (module, options, adapter) => {
    const testing = await Test.createTestingModule({ imports: [module] })
      .overrideProvider(SERVER_TOOLS)
      .useFactory({ factory: (...builtIn: ServerTool[]) => [...builtIn, ...extra], inject: [...SERVER_TOOL_CLASSES] })
      .compile();
    return testing.createNestApplication<NestExpressApplication>(adapter, options);
  };
}
