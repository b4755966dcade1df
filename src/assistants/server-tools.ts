import { WebSearchTool } from '../tools/web-search/web-search.tool';
import { FileSearchTool } from './documents/file-search.tool';

/**
 * Every server tool an assistant can offer: the one list. AssistantsModule registers these
 * classes (ToolsModule.register), the names below and their type come from it, and an
 * assistant's tool settings are checked against the registered tools. Adding a tool: write
 * its class (implementing ServerTool, with a static `toolName`), and add it here.
 */
export const SERVER_TOOL_CLASSES = [WebSearchTool, FileSearchTool] as const;

export type ServerToolName = (typeof SERVER_TOOL_CLASSES)[number]['toolName'];

/** The tools that run on the server; an assistant offers them, a request cannot declare them. */
export const SERVER_TOOL_NAMES: readonly ServerToolName[] = SERVER_TOOL_CLASSES.map((tool) => tool.toolName);
