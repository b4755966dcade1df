import type { ChatMessage, ContentPart, FunctionTool } from '../providers/provider-adapter';
import type { MessagesRequest, RequestBlock, RequestMessage, RequestTool, RequestToolChoice, ToolResultBlock } from './dto/create-message.dto';

/**
 * Translation of a validated Messages request (dto/create-message.dto.ts) into the
 * chat-completions body that `ChatService` runs: the chat core is the one money path (hold,
 * exact charge, usage record, tool loop), this file only maps fields. What it drops, and why,
 * is in docs/api.md ("Anthropic Messages API").
 */

/** The chat body of a request, and what count_tokens counts. */
export interface ChatTranslation {
  body: Record<string, unknown>;
  messages: ChatMessage[];
  tools: FunctionTool[];
}

export function toChatRequest(request: MessagesRequest): ChatTranslation {
  const messages: ChatMessage[] = [
    ...(request.system !== undefined ? [{ role: 'system' as const, content: request.system }] : []),
    ...request.messages.flatMap((message) => toChatMessages(message, request.tools)),
  ];
  // As on Anthropic, a deferred tool reaches the model once a tool_reference has loaded it.
  const loaded = new Set(request.messages.flatMap(referencedToolsOf));
  const tools: FunctionTool[] = request.tools.filter((tool) => !tool.defer_loading || loaded.has(tool.name)).map(functionToolOf);
  const choice = tools.length > 0 ? toolChoiceOf(request.tool_choice) : {};
  const fields: Record<string, unknown> = {
    model: request.model,
    messages,
    max_tokens: request.max_tokens,
    tools: tools.length > 0 ? tools : undefined,
    ...choice,
    stop: request.stop_sequences,
    temperature: request.temperature,
    top_p: request.top_p,
    // Forwarded by the chat core to Anthropic upstreams, dropped by the others.
    top_k: request.top_k,
    user_id: request.user_id,
    // On a model that does not reason the chat core drops it (src/providers/reasoning.ts).
    reasoning_effort: reasoningEffortOfThinking(request.thinking),
    response_format: request.output_schema ? { type: 'json_schema', json_schema: { name: 'output', schema: withoutSchemaKeyword(request.output_schema) } } : undefined,
    stream: request.stream || undefined,
    // The stream's message_delta carries the usage, so the chat stream must end with it.
    stream_options: request.stream ? { include_usage: true } : undefined,
  };
  return { body: Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)), messages, tools };
}

/** Thinking budgets below these are the `low` and `medium` efforts; from 16384 on, `high`. */
export const THINKING_BUDGET_BANDS = { low: 4096, medium: 16_384 } as const;

/**
 * Anthropic's `thinking` as chat's `reasoning_effort`: `enabled` by its budget's band (without
 * a budget: medium), `adaptive` medium; `disabled`, or a type unknown here, none.
 */
export function reasoningEffortOfThinking(thinking: MessagesRequest['thinking']): 'low' | 'medium' | 'high' | undefined {
  if (thinking?.type === 'adaptive') return 'medium';
  if (thinking?.type !== 'enabled') return undefined;
  const budget = thinking.budget_tokens;
  if (typeof budget !== 'number') return 'medium';
  return budget < THINKING_BUDGET_BANDS.low ? 'low' : budget < THINKING_BUDGET_BANDS.medium ? 'medium' : 'high';
}

/**
 * One Anthropic message as chat messages. A user message's tool results become tool messages
 * first (chat wants them right after the assistant's calls), then its other blocks a user
 * message; thinking blocks are dropped (their signatures mean nothing to other providers).
 */
export function toChatMessages(message: RequestMessage, tools: readonly RequestTool[] = []): ChatMessage[] {
  const { role, content } = message;
  if (typeof content === 'string') return [{ role, content } as ChatMessage];
  if (role === 'system') return [{ role: 'system', content: textOf(content) }];
  if (role === 'assistant') return assistantMessageOf(content);

  const toolMessages: ChatMessage[] = [];
  const parts: ContentPart[] = [];
  for (const block of content) {
    if (block.type === 'tool_result') {
      const text = toolResultTextOf(block.content, tools);
      toolMessages.push({ role: 'tool', tool_call_id: block.tool_use_id, content: block.is_error ? `Error: ${text}` : text });
      // A chat tool message carries text only: the result's images and PDFs follow in the user message.
      for (const part of block.content) if (part.type === 'image' || part.type === 'document') parts.push(...partsOf(part));
    } else {
      parts.push(...partsOf(block));
    }
  }
  if (parts.length === 0) return toolMessages;
  const onlyText = parts.length === 1 && parts[0].type === 'text';
  return [...toolMessages, { role: 'user', content: onlyText ? (parts[0] as { text: string }).text : parts } as ChatMessage];
}

/**
 * A tool result's text. Its tool_references (a tool search's answer) become the loaded tools'
 * definitions in a `<functions>` block, as Claude Code's ToolSearch tells the model to expect.
 */
function toolResultTextOf(content: readonly ToolResultBlock[], tools: readonly RequestTool[]): string {
  const text = content.map((part) => (part.type === 'text' ? part.text : part.type === 'document' ? documentTextOf(part) : '')).join('');
  const references = content.flatMap((part) => (part.type === 'tool_reference' ? [part.tool_name] : []));
  if (references.length === 0) return text;
  const definitions = references.map((name) => {
    const tool = tools.find((candidate) => candidate.name === name);
    return `<function>${JSON.stringify(tool ? { description: tool.description, name, parameters: withoutSchemaKeyword(tool.input_schema) } : { name })}</function>`;
  });
  return [text, `<functions>\n${definitions.join('\n')}\n</functions>`].filter((part) => part.length > 0).join('\n');
}

function referencedToolsOf(message: RequestMessage): string[] {
  if (typeof message.content === 'string') return [];
  return message.content.flatMap((block) =>
    block.type === 'tool_result' ? block.content.flatMap((part) => (part.type === 'tool_reference' ? [part.tool_name] : [])) : [],
  );
}

function functionToolOf(tool: RequestTool): FunctionTool {
  return {
    type: 'function',
    function: { name: tool.name, ...(tool.description !== undefined ? { description: tool.description } : {}), parameters: withoutSchemaKeyword(tool.input_schema) },
  };
}

function assistantMessageOf(blocks: RequestBlock[]): ChatMessage[] {
  const text = textOf(blocks);
  const toolCalls = blocks.flatMap((block) =>
    block.type === 'tool_use' ? [{ id: block.id, type: 'function' as const, function: { name: block.name, arguments: JSON.stringify(block.input) } }] : [],
  );
  // Nothing left (only thinking): no message, rather than an empty one that upstreams refuse.
  if (text.length === 0 && toolCalls.length === 0) return [];
  return [{ role: 'assistant', content: text.length > 0 ? text : null, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) }];
}

/** The chat content parts of a user block: text, an image, a PDF as a file, a text document as text. */
function partsOf(block: RequestBlock): ContentPart[] {
  switch (block.type) {
    case 'text':
      return block.text.length > 0 ? [{ type: 'text', text: block.text }] : [];
    case 'image':
      return [{ type: 'image_url', image_url: { url: block.source.type === 'url' ? block.source.url : `data:${block.source.media_type};base64,${block.source.data}` } }];
    case 'document':
      if (block.source.type === 'base64') {
        return [{ type: 'file', file: { file_data: `data:application/pdf;base64,${block.source.data}`, filename: block.title ?? 'document.pdf' } }];
      }
      if (block.source.type === 'content') return block.source.blocks.flatMap(partsOf);
      return [{ type: 'text', text: documentTextOf(block) }];
    default:
      // thinking, redacted_thinking; tool blocks are handled by the callers.
      return [];
  }
}

function documentTextOf(block: Extract<RequestBlock, { type: 'document' }>): string {
  const { source } = block;
  const text = source.type === 'text' ? source.data : source.type === 'content' ? textOf(source.blocks) : '';
  return block.title ? `${block.title}\n\n${text}` : text;
}

function textOf(blocks: readonly RequestBlock[]): string {
  return blocks.map((block) => (block.type === 'text' ? block.text : '')).join('');
}

/** tool_choice as chat's `tool_choice` and `parallel_tool_calls` (only sent with tools: OpenAI refuses them without). */
function toolChoiceOf(choice: RequestToolChoice | undefined): Record<string, unknown> {
  if (!choice) return {};
  const toolChoice =
    choice.type === 'any' ? 'required' : choice.type === 'tool' ? { type: 'function', function: { name: choice.name } } : choice.type;
  return { tool_choice: toolChoice, ...(choice.disable_parallel_tool_use === true ? { parallel_tool_calls: false } : {}) };
}

/** Claude Code's schemas carry `$schema`, which some providers refuse in a function's parameters. */
function withoutSchemaKeyword(schema: Record<string, unknown>): Record<string, unknown> {
  if (!('$schema' in schema)) return schema;
  const { $schema: _dropped, ...rest } = schema;
  return rest;
}
