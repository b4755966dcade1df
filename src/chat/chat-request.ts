import { plainToInstance } from 'class-transformer';
import { validate } from 'class-validator';
import { SERVER_TOOL_NAMES } from '../assistants/server-tools';
import { ApiError } from '../common/errors/api-error';
import { toValidationError } from '../common/validation/validation.pipe';
import type { ChatMessage, FunctionTool } from '../providers/provider-adapter';
import { ChatCompletionRequestDto } from './dto/chat-completion-request.dto';
import {
  MAX_AUDIO_DATA_CHARS,
  MAX_FILE_DATA_CHARS_PER_REQUEST,
  MAX_IMAGE_URL_CHARS,
  MAX_IMAGE_URL_CHARS_PER_REQUEST,
  MAX_IMAGES_PER_REQUEST,
  MAX_MESSAGE_CONTENT_CHARS,
  MAX_MESSAGES,
  MAX_TOOLS,
} from './dto/request-limits';
import { wellFormedRequest } from './dto/well-formed-request';

/** OpenAI's bound on `n`; the hold multiplies the output by it, so the wallet bounds it too. */
const MAX_CHOICES = 128;

/** Fields the service handles itself; every other field is forwarded to the provider. */
const OWN_FIELDS = new Set([
  'model',
  'models',
  'assistant_id',
  'messages',
  'stream',
  'stream_options',
  'tools',
  'temperature',
  'max_tokens',
  'max_completion_tokens',
  'user_id',
  'subscription_id',
  'conversation_id',
]);

export interface ChatRequest {
  dto: ChatCompletionRequestDto;
  messages: ChatMessage[];
  tools: FunctionTool[];
  /** The smaller of max_tokens and max_completion_tokens, if either was given. */
  maxTokens?: number;
  maxTokensField?: 'max_tokens' | 'max_completion_tokens';
  /** Number of choices asked for (`n`), which multiplies the output to hold for. */
  choices: number;
  extra: Record<string, unknown>;
}

/**
 * Validates a chat request as OpenAI does, with `param` naming the field at fault. It runs
 * inside the chat service rather than as a pipe, so that a request refused here still gets
 * its usage record.
 */
export async function parseChatRequest(raw: unknown, mode: { assistantMode: boolean }): Promise<ChatRequest> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw ApiError.badRequest('The request body must be a JSON object.', undefined, 'invalid_body');
  }
  // An explicit null is an absent field, as OpenAI takes it: openai-python sends `"max_tokens": null`
  // for `max_tokens=None`, which must neither become a cap of 0 nor be forwarded upstream.
  const fields = Object.entries(raw).filter(([, value]) => value !== null);
  const own = Object.fromEntries(fields.filter(([key]) => OWN_FIELDS.has(key)));
  const extra = Object.fromEntries(fields.filter(([key]) => !OWN_FIELDS.has(key)));
  checkSizes(own);
  const dto = wellFormedRequest(own) ?? (await validated(own));

  dto.messages.forEach(checkRoleRules);
  const tools = (dto.tools ?? []).map((tool, index) => checkTool(tool, index, mode.assistantMode));
  if (dto.stream_options !== undefined && dto.stream !== true) {
    throw ApiError.badRequest("The 'stream_options' parameter is only allowed when 'stream' is enabled.", 'stream_options');
  }
  const n = extra.n;
  if (n !== undefined && (!Number.isInteger(n) || (n as number) < 1 || (n as number) > MAX_CHOICES)) {
    throw ApiError.badRequest(`n must be an integer from 1 to ${MAX_CHOICES}.`, 'n');
  }

  const caps = [dto.max_tokens, dto.max_completion_tokens].filter((cap): cap is number => cap !== undefined);
  return {
    dto,
    messages: dto.messages.map(toUpstreamMessage),
    tools,
    maxTokens: caps.length > 0 ? Math.min(...caps) : undefined,
    maxTokensField: dto.max_tokens !== undefined ? 'max_tokens' : dto.max_completion_tokens !== undefined ? 'max_completion_tokens' : undefined,
    choices: (n as number | undefined) ?? 1,
    extra,
  };
}

/**
 * The own fields through class-transformer and class-validator, which word what is wrong: for
 * a request that wellFormedRequest() did not accept.
 */
async function validated(own: Record<string, unknown>): Promise<ChatCompletionRequestDto> {
  const dto = plainToInstance(ChatCompletionRequestDto, withoutPrototypeKeys(own));
  const errors = await validate(dto, { stopAtFirstError: true, forbidUnknownValues: false });
  if (errors.length > 0) throw toValidationError(errors);
  return dto;
}

/**
 * A copy without the keys that name members of Object.prototype (`constructor`, `toString`...),
 * at any depth: class-transformer drops them anyway, and a nested `"constructor"` key (a
 * property of a tool's JSON Schema, say) made it throw instead of letting class-validator say
 * what is wrong. None of them is a field the DTOs validate.
 */
function withoutPrototypeKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutPrototypeKeys);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(Object.entries(value).flatMap(([key, item]) => (key in Object.prototype ? [] : [[key, withoutPrototypeKeys(item)]])));
}

/**
 * The size limits of request-limits.ts, checked on the raw body before anything copies,
 * validates or counts it: a cheap pass over the messages and their parts only.
 */
function checkSizes(own: Record<string, unknown>): void {
  const { messages, tools } = own;
  if (Array.isArray(tools) && tools.length > MAX_TOOLS) {
    throw ApiError.badRequest(`tools can have at most ${MAX_TOOLS} items (got ${tools.length}).`, 'tools', 'array_too_long');
  }
  if (!Array.isArray(messages)) return;
  if (messages.length > MAX_MESSAGES) {
    throw ApiError.badRequest(`messages can have at most ${MAX_MESSAGES} items (got ${messages.length}).`, 'messages', 'array_too_long');
  }
  let images = 0;
  let imageChars = 0;
  let fileChars = 0;
  messages.forEach((message: unknown, index) => {
    const content = (message as { content?: unknown } | null)?.content;
    if (typeof content === 'string') checkLength(content, MAX_MESSAGE_CONTENT_CHARS, `messages.${index}.content`);
    if (!Array.isArray(content)) return;
    content.forEach((part: unknown, partIndex) => {
      const at = `messages.${index}.content.${partIndex}`;
      const { text, image_url: image, file, input_audio: audio } = (part ?? {}) as {
        text?: unknown;
        image_url?: { url?: unknown } | null;
        file?: { file_data?: unknown } | null;
        input_audio?: { data?: unknown } | null;
      };
      if (typeof text === 'string') checkLength(text, MAX_MESSAGE_CONTENT_CHARS, `${at}.text`);
      if (typeof file?.file_data === 'string') fileChars += file.file_data.length;
      if (typeof audio?.data === 'string') checkLength(audio.data, MAX_AUDIO_DATA_CHARS, `${at}.input_audio.data`);
      const url = image?.url;
      if (typeof url !== 'string') return;
      checkLength(url, MAX_IMAGE_URL_CHARS, `${at}.image_url.url`);
      images += 1;
      imageChars += url.length;
    });
  });
  if (images > MAX_IMAGES_PER_REQUEST) {
    throw ApiError.badRequest(`A request can carry at most ${MAX_IMAGES_PER_REQUEST} images (got ${images}).`, 'messages', 'too_many_images');
  }
  if (fileChars > MAX_FILE_DATA_CHARS_PER_REQUEST) {
    throw ApiError.badRequest(
      `The files of a request can total at most ${MAX_FILE_DATA_CHARS_PER_REQUEST} characters of file_data (got ${fileChars}).`,
      'messages',
      'files_too_large',
    );
  }
  if (imageChars > MAX_IMAGE_URL_CHARS_PER_REQUEST) {
    throw ApiError.badRequest(
      `The images of a request can total at most ${MAX_IMAGE_URL_CHARS_PER_REQUEST} characters of URL (got ${imageChars}).`,
      'messages',
      'images_too_large',
    );
  }
}

function checkLength(text: string, max: number, param: string): void {
  if (text.length > max) {
    throw ApiError.badRequest(`${param} can be at most ${max} characters long (got ${text.length}).`, param, 'string_too_long');
  }
}

function checkRoleRules(message: ChatCompletionRequestDto['messages'][number], index: number): void {
  const at = `messages.${index}`;
  const hasContent = message.content !== undefined && message.content !== null;
  switch (message.role) {
    case 'tool':
      if (!message.tool_call_id) throw ApiError.badRequest(`${at}.tool_call_id is required in a tool message.`, `${at}.tool_call_id`);
      if (!hasContent) throw ApiError.badRequest(`${at}.content is required in a tool message.`, `${at}.content`);
      break;
    case 'assistant':
      if (!hasContent && !message.tool_calls?.length) {
        throw ApiError.badRequest(`${at} needs content or tool_calls.`, `${at}.content`);
      }
      break;
    default:
      if (!hasContent) throw ApiError.badRequest(`${at}.content is required in a ${message.role} message.`, `${at}.content`);
      if (message.tool_calls) throw ApiError.badRequest(`Only assistant messages carry tool_calls.`, `${at}.tool_calls`);
  }
}

function checkTool(tool: NonNullable<ChatCompletionRequestDto['tools']>[number], index: number, assistantMode: boolean): FunctionTool {
  const at = `tools.${index}`;
  const name = tool.type === 'function' ? tool.function?.name : tool.type;
  if ((SERVER_TOOL_NAMES as readonly string[]).includes(name ?? '')) {
    throw assistantMode
      ? ApiError.badRequest(
          `${name} is a server tool: it comes from the assistant's settings and cannot be declared in the request.`,
          at,
          'server_tool_in_request',
        )
      : ApiError.badRequest(
          `The ${name} tool runs on the server and needs an assistant: send assistant_id instead of model to use it.`,
          at,
          'tool_requires_assistant',
        );
  }
  if (tool.type !== 'function' || !tool.function) {
    throw ApiError.badRequest(`${at} must be {"type": "function", "function": {...}}.`, `${at}.type`);
  }
  return tool as FunctionTool;
}

/**
 * Drops absent fields so upstream requests carry only what the client sent; a null (`name`,
 * `tool_calls`) is absent too, except `content`, where null means "only tool calls".
 */
function toUpstreamMessage(message: ChatCompletionRequestDto['messages'][number]): ChatMessage {
  return Object.fromEntries(
    Object.entries(message).filter(([key, value]) => value !== undefined && (value !== null || key === 'content')),
  ) as unknown as ChatMessage;
}
