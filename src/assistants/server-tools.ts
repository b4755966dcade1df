import { WebSearchTool } from '../tools/web-search/web-search.tool';
import { FileSearchTool } from './documents/file-search.tool';

/**
 * Every server tool an assistant can offer: the one list. AssistantsModule registers these
 * classes (ToolsModule.register); ToolsService then serves what each class's `descriptor`
 * says (name, dashboard switch, price key, Responses API aliases) to the assistants'
 * validation, the dashboard and the Responses API. Adding a tool: write its class
 * (implementing ServerTool, with a static `descriptor`), and add it here.
 */
export const SERVER_TOOL_CLASSES = [WebSearchTool, FileSearchTool] as const;

export type ServerToolName = (typeof SERVER_TOOL_CLASSES)[number]['descriptor']['name'];

/** The tools that run on the server; an assistant offers them, a request cannot declare them. */
export const SERVER_TOOL_NAMES: readonly ServerToolName[] = SERVER_TOOL_CLASSES.map((tool) => tool.descriptor.name);
