import {
  FunctionCallingConfigMode,
  type Content,
  type FunctionCallingConfig,
  type GenerateContentConfig,
  type GenerateContentParameters,
  type Part,
  type Tool,
} from '@google/genai';
import type OpenAI from 'openai';
import { ApiError } from '../../common/errors/api-error';
import type { ChatMessage, ProviderRequest } from '../provider-adapter';
import { checkReasoningEffort, geminiThinkingBudget, reasoningEffortOf } from '../reasoning';
import { isPlainObject, parseJson } from './json';

// OpenAI chat completion request -> Gemini generateContent request.

type MessageToolCall = OpenAI.Chat.ChatCompletionMessageFunctionToolCall;

/**
 * Refuses, before any money is held, what Gemini cannot honour: the parameters (see
 * `checkParameters`) and the content parts of the client's user messages.
 */
export function checkGeminiRequest(extra: Record<string, unknown>, messages: ChatMessage[] = []): void {
  checkParameters(extra);
  // Content parts are checked message by message: the same translation the call makes.
  messages.forEach((message, index) => {
    if (message.role === 'user') userParts(message.content, `messages.${index}`);
  });
}

/**
 * Thought signatures of Gemini 3 and later cannot ride along in OpenAI messages, and those
 * models refuse replayed function calls without one; Google documents this value for calls
 * whose signature is not available. Gemini 1.x and 2.x need no signature and get none.
 */
export const SKIP_THOUGHT_SIGNATURE = 'skip_thought_signature_validator';

/** What Gemini cannot honour and would change the answer's shape is refused. */
export function checkParameters(extra: Record<string, unknown>): void {
  const refuse = (message: string, param: string) => {
    throw ApiError.badRequest(message, param, 'unsupported_parameter');
  };
  if (Array.isArray(extra.modalities) && extra.modalities.includes('audio')) refuse('Gemini models answer in text here: audio output is not supported.', 'modalities');
  if (extra.audio !== undefined && extra.audio !== null) refuse('Gemini models answer in text here: audio output is not supported.', 'audio');
  const formatType = (extra.response_format as { type?: unknown } | null | undefined)?.type;
  if (formatType !== undefined && !['text', 'json_object', 'json_schema'].includes(formatType as string)) {
    refuse(`response_format.type ${JSON.stringify(formatType)} is not supported; use text, json_object or json_schema.`, 'response_format.type');
  }
  checkReasoningEffort(extra);
}

export function toGeminiRequest(request: ProviderRequest): GenerateContentParameters {
  checkParameters(request.extra);
  const { systemInstruction, contents } = toContents(request.messages, needsThoughtSignatures(request.model.upstreamModel));
  const config: GenerateContentConfig = {
    maxOutputTokens: request.maxTokens,
    // One HTTP request per call: retries, continuation and tool execution are not the SDK's job here.
    automaticContinuation: false,
    automaticFunctionCalling: { disable: true },
  };
  if (systemInstruction) config.systemInstruction = systemInstruction;
  if (request.temperature !== undefined) config.temperature = request.temperature;

  const tools = toTools(request.tools);
  if (tools) {
    config.tools = tools;
    const functionCallingConfig = toFunctionCallingConfig(request.extra.tool_choice);
    if (functionCallingConfig) config.toolConfig = { functionCallingConfig };
  }
  Object.assign(config, toGenerationSettings(request.extra));
  return { model: request.model.upstreamModel, contents, config };
}

function needsThoughtSignatures(upstreamModel: string): boolean {
  return !/(^|\/)gemini-[12](\.|-)/i.test(upstreamModel);
}

function toContents(messages: ChatMessage[], signFunctionCalls: boolean): { systemInstruction?: Content; contents: Content[] } {
  const systemParts: Part[] = [];
  const contents: Content[] = [];
  const toolNames = new Map<string, string>();
  const add = (role: 'user' | 'model', parts: Part[]) => {
    if (parts.length === 0) return;
    const last = contents[contents.length - 1];
    if (last?.role === role) last.parts!.push(...parts);
    else contents.push({ role, parts });
  };

  messages.forEach((message, index) => {
    const at = `messages.${index}`;
    switch (message.role) {
      case 'system':
      case 'developer':
        systemParts.push(...textParts(textOf(message.content)));
        break;
      case 'user':
        add('user', userParts(message.content, at));
        break;
      case 'assistant': {
        const parts: Part[] = [];
        if (typeof message.content === 'string') parts.push(...textParts(message.content));
        else for (const part of message.content ?? []) parts.push(...textParts(part.type === 'text' ? part.text : part.refusal));
        let signed = !signFunctionCalls;
        const calls = (message.tool_calls ?? [])
          .filter((call): call is MessageToolCall => call.type === 'function')
          .map((call) => ({ id: call.id, ...call.function }));
        if (message.function_call) calls.push({ id: '', ...message.function_call });
        for (const call of calls) {
          if (call.id) toolNames.set(call.id, call.name);
          const part: Part = { functionCall: { name: call.name, args: parseArguments(call.arguments) } };
          // Only the first function call of a turn carries a signature.
          if (!signed) part.thoughtSignature = SKIP_THOUGHT_SIGNATURE;
          signed = true;
          parts.push(part);
        }
        add('model', parts);
        break;
      }
      case 'tool': {
        const name = toolNames.get(message.tool_call_id);
        if (!name) {
          throw ApiError.badRequest(
            `${at}.tool_call_id ${JSON.stringify(message.tool_call_id)} answers no tool call of an earlier assistant message.`,
            `${at}.tool_call_id`,
          );
        }
        add('user', [{ functionResponse: { name, response: toolResponse(textOf(message.content)) } }]);
        break;
      }
      case 'function':
        add('user', [{ functionResponse: { name: message.name, response: toolResponse(message.content ?? '') } }]);
        break;
    }
  });
  return { systemInstruction: systemParts.length > 0 ? { parts: systemParts } : undefined, contents };
}

function userParts(content: OpenAI.Chat.ChatCompletionUserMessageParam['content'], at: string): Part[] {
  if (typeof content === 'string') return textParts(content);
  return content.flatMap((part, index): Part[] => {
    switch (part.type) {
      case 'text':
        return textParts(part.text);
      case 'image_url':
        return [imagePart(part.image_url.url, `${at}.content.${index}.image_url.url`)];
      case 'input_audio':
        return [{ inlineData: { mimeType: `audio/${part.input_audio.format}`, data: part.input_audio.data } }];
      case 'file':
        return [filePart(part.file, `${at}.content.${index}.file`)];
      default:
        throw ApiError.badRequest(
          `${at}.content.${index} is a ${JSON.stringify((part as { type?: unknown }).type)} part, which Gemini models cannot be sent.`,
          `${at}.content.${index}.type`,
        );
    }
  });
}

/** `data:` URLs travel inline; other URLs by reference, with the type guessed from the extension. */
function imagePart(url: string, param: string): Part {
  if (/^data:/i.test(url)) {
    const match = /^data:([^,]*),(.*)$/is.exec(url);
    if (!match) throw ApiError.badRequest(`${param} is not a valid data URL.`, param);
    const meta = match[1].split(';').map((item) => item.trim());
    const base64 = meta.slice(1).some((item) => item.toLowerCase() === 'base64');
    let data: string;
    try {
      data = base64 ? match[2].replace(/\s+/g, '') : Buffer.from(decodeURIComponent(match[2]), 'utf8').toString('base64');
    } catch {
      throw ApiError.badRequest(`${param} is not a valid data URL.`, param);
    }
    return { inlineData: { mimeType: meta[0] || 'image/jpeg', data } };
  }
  return { fileData: { fileUri: url, mimeType: mimeTypeOf(url) } };
}

/** OpenAI's file part: its base64 data URL travels inline (a PDF, or any type Gemini reads); file ids mean nothing here. */
function filePart(file: { file_data?: string; file_id?: string }, at: string): Part {
  if (file?.file_data === undefined && file?.file_id !== undefined) {
    throw ApiError.badRequest(
      `${at}.file_id: this service stores no files; send the file itself as file_data (a base64 data: URL).`,
      `${at}.file_id`,
      'unsupported_content',
    );
  }
  const match = /^data:([^;,]+)((?:;[^;,]*)*),(.*)$/is.exec(file?.file_data ?? '');
  if (!match || !match[2].split(';').some((item) => item.trim().toLowerCase() === 'base64')) {
    throw ApiError.badRequest(`${at}.file_data must be a base64 data: URL (data:application/pdf;base64,...).`, `${at}.file_data`, 'unsupported_content');
  }
  return { inlineData: { mimeType: match[1].trim().toLowerCase(), data: match[3].replace(/\s+/g, '') } };
}

const MIME_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  heic: 'image/heic',
  heif: 'image/heif',
  bmp: 'image/bmp',
  svg: 'image/svg+xml',
  pdf: 'application/pdf',
};

export function mimeTypeOf(url: string): string {
  let path = url;
  try {
    path = new URL(url).pathname;
  } catch {
    path = url.split(/[?#]/)[0];
  }
  const extension = /\.([a-z0-9]+)$/i.exec(path)?.[1]?.toLowerCase() ?? '';
  return MIME_TYPES[extension] ?? 'image/jpeg';
}

function textParts(text: string | null | undefined): Part[] {
  return text ? [{ text }] : [];
}

function textOf(content: string | Array<{ type: string; text?: string }> | null | undefined): string {
  if (typeof content === 'string') return content;
  return (content ?? []).map((part) => (part.type === 'text' ? (part.text ?? '') : '')).join('');
}

/** Arguments as the model wrote them; what does not parse to an object becomes `{}`. */
function parseArguments(text: string): Record<string, unknown> {
  const parsed = parseJson(text);
  return isPlainObject(parsed) ? parsed : {};
}

function toolResponse(text: string): Record<string, unknown> {
  const parsed = parseJson(text);
  return isPlainObject(parsed) ? parsed : { content: text };
}

function toTools(tools: ProviderRequest['tools']): Tool[] | undefined {
  const declarations = (tools ?? [])
    .filter((tool) => tool.type === 'function')
    .map((tool) => ({
      name: tool.function.name,
      ...(tool.function.description !== undefined ? { description: tool.function.description } : {}),
      // JSON Schema as it came: Gemini reads it natively (no conversion to its OpenAPI subset).
      ...(tool.function.parameters !== undefined ? { parametersJsonSchema: tool.function.parameters } : {}),
    }));
  return declarations.length > 0 ? [{ functionDeclarations: declarations }] : undefined;
}

function toFunctionCallingConfig(toolChoice: unknown): FunctionCallingConfig | undefined {
  if (toolChoice === 'auto') return { mode: FunctionCallingConfigMode.AUTO };
  if (toolChoice === 'none') return { mode: FunctionCallingConfigMode.NONE };
  if (toolChoice === 'required') return { mode: FunctionCallingConfigMode.ANY };
  if (!isPlainObject(toolChoice)) return undefined;
  const choice = toolChoice as {
    type?: unknown;
    function?: { name?: unknown };
    allowed_tools?: { mode?: unknown; tools?: unknown };
  };
  if (choice.type === 'function' && typeof choice.function?.name === 'string') {
    return { mode: FunctionCallingConfigMode.ANY, allowedFunctionNames: [choice.function.name] };
  }
  if (choice.type === 'allowed_tools' && Array.isArray(choice.allowed_tools?.tools)) {
    const names = (choice.allowed_tools.tools as Array<{ function?: { name?: unknown } }>)
      .map((tool) => tool?.function?.name)
      .filter((name): name is string => typeof name === 'string');
    // VALIDATED: calls limited to the names, but the model may answer in text too.
    const mode = choice.allowed_tools.mode === 'required' ? FunctionCallingConfigMode.ANY : FunctionCallingConfigMode.VALIDATED;
    return { mode, allowedFunctionNames: names };
  }
  return undefined;
}

/** The OpenAI sampling and format parameters that Gemini has; other extras are OpenAI's only. */
function toGenerationSettings(extra: Record<string, unknown>): GenerateContentConfig {
  const config: GenerateContentConfig = {};
  const number = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value);
  if (number(extra.top_p)) config.topP = extra.top_p;
  if (typeof extra.stop === 'string') config.stopSequences = [extra.stop];
  else if (Array.isArray(extra.stop) && extra.stop.length > 0 && extra.stop.every((s) => typeof s === 'string')) {
    config.stopSequences = extra.stop as string[];
  }
  if (number(extra.seed)) config.seed = extra.seed;
  // reasoning_effort as a thinking budget (src/providers/reasoning.ts); without one, the model's own thinking.
  const thinkingBudget = geminiThinkingBudget(reasoningEffortOf(extra));
  if (thinkingBudget !== undefined) config.thinkingConfig = { thinkingBudget };
  // 0 is OpenAI's default and means no penalty; several Gemini models refuse the field outright.
  if (number(extra.presence_penalty) && extra.presence_penalty !== 0) config.presencePenalty = extra.presence_penalty;
  if (number(extra.frequency_penalty) && extra.frequency_penalty !== 0) config.frequencyPenalty = extra.frequency_penalty;
  if (number(extra.n) && extra.n > 1) config.candidateCount = extra.n;
  if (extra.logprobs === true) {
    config.responseLogprobs = true;
    if (number(extra.top_logprobs) && extra.top_logprobs > 0) config.logprobs = extra.top_logprobs;
  }

  const format = extra.response_format as { type?: unknown; json_schema?: { schema?: unknown } } | undefined;
  if (format?.type === 'json_object') config.responseMimeType = 'application/json';
  if (format?.type === 'json_schema') {
    config.responseMimeType = 'application/json';
    if (format.json_schema?.schema !== undefined) config.responseJsonSchema = format.json_schema.schema;
  }
  return config;
}
