import { applyDecorators, Body, Controller, HttpCode, Logger, Post, Req, Res, UseFilters } from '@nestjs/common';
import { ApiBody, ApiHeader, ApiOperation, ApiProduces, ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import { apiCaller } from '../chat/chat.service';
import { EventStreamFormat, inStreamError, isStreamRequest, writeEventStream } from '../chat/sse';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import { clientGone } from '../common/http/client-gone.decorator';
import { Idempotent } from '../common/http/idempotent.decorator';
import type { ApiRequest, Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { anthropicErrorOf } from '../common/errors/anthropic-errors';
import { CreateMessageRequestDto } from './dto/create-message.dto';
import { CountTokensResponseDto, MessageObjectDto } from './dto/messages.dto';
import type { MessageEvent } from './message-events';
import type { MessageObject, NativeMessageObject } from './message-object';
import { MessagesErrorFilter } from './messages-error.filter';
import { MessagesService } from './messages.service';

/** Anthropic's SSE frames: each event named, no `[DONE]`; a failure after the start is an `error` event. */
const ANTHROPIC_EVENT_STREAM: EventStreamFormat = {
  frame: (event) => `event: ${(event as MessageEvent).type}\ndata: ${JSON.stringify(event)}\n\n`,
  end: [],
  failed: (error) => [`event: error\ndata: ${JSON.stringify(anthropicErrorOf(error))}\n\n`],
};

/** The headers Anthropic's clients send, as the OpenAPI document describes them. */
const AnthropicHeaders = () =>
  applyDecorators(
    ApiHeader({ name: 'anthropic-version', required: false, description: "Accepted (Anthropic's SDKs send `2023-06-01`); never a refusal." }),
    ApiHeader({
      name: 'anthropic-beta',
      required: false,
      description: 'Accepted; unknown flags are never a refusal. An Anthropic deployment gets the flags of a documented list (docs/api.md); none changes a translated request.',
    }),
    ApiHeader({ name: 'x-api-key', required: false, description: "The API key, as Anthropic's SDKs send it (`Authorization: Bearer` works too)." }),
  );

/** The Anthropic Messages API, translated onto the chat core (see MessagesService). */
@ApiTags('Messages')
@UseFilters(MessagesErrorFilter)
@Controller('v1/messages')
export class MessagesController {
  private readonly logger = new Logger('Messages');

  constructor(private readonly messages: MessagesService) {}

  @Post()
  @HttpCode(200)
  @ApiOperation({
    summary: 'Create a message (Anthropic Messages API)',
    description:
      "Anthropic's Messages API for `@anthropic-ai/sdk`, the `anthropic` Python SDK and Claude Code, on every model of the catalog: " +
      'the request runs through the chat completions core (the same hold, exact charge in `x_service`, ' +
      'usage record with source `messages`, key limits, rate limit, routing and fallbacks). Streamed (`stream: true`): `message_start`, ' +
      'per block `content_block_start` / `content_block_delta` / `content_block_stop`, `message_delta`, `message_stop`, `ping` while ' +
      'waiting; a failure after the start is an `error` event. Errors have Anthropic\'s shape `{"type": "error", "error": {"type", ' +
      '"message", "code"}}`. An Anthropic deployment gets the request as it came and its answer comes back as it was (thinking, ' +
      'signatures, citations, cache usage); other providers get a translation. What happens to each field on each provider: ' +
      'docs/api.md, "Anthropic Messages API".',
  })
  @ApiBody({ type: CreateMessageRequestDto })
  @Idempotent({
    scope: 'messages.create',
    when: (req) => !isStreamRequest(req.body),
    description:
      'Non-streaming requests: a retry with the same key and body within 24 hours returns the stored message ' +
      '(with `Idempotent-Replayed: true`) and is not charged again. The same key with another body: 409.',
  })
  @AnthropicHeaders()
  @ApiProduces('application/json', 'text/event-stream')
  @ApiStandardResponses({ ok: MessageObjectDto, errors: [400, 402, 404, 409, 413, 415, 502, 503, 504] })
  async create(
    @CurrentPrincipal() principal: Principal,
    // Validated by the service, so that a refused request still gets its usage record.
    @Body() body: unknown,
    @Req() req: ApiRequest,
    @Res({ passthrough: true }) res: Response,
  ): Promise<MessageObject | NativeMessageObject | undefined> {
    const caller = apiCaller(principal, req);
    const beta = betaOf(req);
    if (isStreamRequest(body)) {
      const toApiError = (error: unknown) => inStreamError(error, req.id, this.logger);
      await writeEventStream(res, this.messages.stream(caller, body, toApiError, beta), toApiError, ANTHROPIC_EVENT_STREAM);
      return undefined;
    }
    return this.messages.create(caller, body, clientGone(res), beta);
  }

  @Post('count_tokens')
  @HttpCode(200)
  @ApiOperation({
    summary: 'Count the input tokens of a message request',
    description:
      'The same body as `POST /v1/messages` (validated the same way); `{input_tokens}` as Anthropic counts it (its own count_tokens) ' +
      "when the model's first deployment is Anthropic's, else (or when that call fails) as our tokenizer counts the translated prompt " +
      '(the count the hold is based on). Free: nothing is held or charged; rate limited like other requests.',
  })
  @ApiBody({ type: CreateMessageRequestDto })
  @AnthropicHeaders()
  @ApiStandardResponses({ ok: CountTokensResponseDto, errors: [400, 404, 413, 415] })
  countTokens(@Body() body: unknown, @Req() req: ApiRequest): Promise<CountTokensResponseDto> {
    return this.messages.countTokens(body, betaOf(req));
  }
}

/** The request's anthropic-beta values (the header may come more than once). */
function betaOf(req: ApiRequest): string[] {
  const header = req.headers['anthropic-beta'];
  return header === undefined ? [] : Array.isArray(header) ? header : [header];
}
