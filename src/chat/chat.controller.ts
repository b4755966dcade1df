import { Body, Controller, Logger, Post, Req, Res, UseFilters } from '@nestjs/common';
import { ApiBody, ApiHeader, ApiOperation, ApiProduces, ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import { ApiError } from '../common/errors/api-error';
import { databaseUnavailableError, isDatabaseUnavailable } from '../common/errors/database-unavailable';
import type { ApiRequest, Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { ChatRefusalFilter } from './chat-refusal.filter';
import { ChatService } from './chat.service';
import { ChatCompletionRequestDto } from './dto/chat-completion-request.dto';
import { ChatCompletionResponseDto } from './dto/chat-completion-response.dto';
import { IdempotencyService } from './idempotency.service';
import { writeEventStream } from './sse';

@ApiTags('Chat')
@UseFilters(ChatRefusalFilter)
@Controller('v1/chat')
export class ChatController {
  private readonly logger = new Logger('Chat');

  constructor(
    private readonly chat: ChatService,
    private readonly idempotency: IdempotencyService,
  ) {}

  @Post('completions')
  @ApiOperation({
    summary: 'Create a chat completion',
    description:
      'OpenAI Chat Completions, plain or streamed (`stream: true` answers Server-Sent Events ending with `data: [DONE]`). ' +
      'Direct mode names a `model`. The response adds `x_service` (cost in millicents, iterations, tools used). ' +
      'Money for the request is held from the wallet while it runs and the exact cost is charged when it ends.',
  })
  @ApiBody({ type: ChatCompletionRequestDto })
  @ApiHeader({
    name: 'Idempotency-Key',
    required: false,
    description:
      'Non-streaming requests: a retry with the same key and body within 24 hours returns the stored response ' +
      '(with `Idempotent-Replayed: true`) and is not charged again. The same key with another body: 409.',
  })
  @ApiProduces('application/json', 'text/event-stream')
  @ApiStandardResponses({ ok: ChatCompletionResponseDto, errors: [400, 402, 404, 409, 413, 415, 502, 503, 504] })
  async create(
    @CurrentPrincipal() principal: Principal,
    // Validated by the chat service, so that refused requests get a usage record too.
    @Body() body: unknown,
    @Req() req: ApiRequest,
    @Res() res: Response,
  ): Promise<void> {
    const caller = { principal, requestId: req.id };
    if ((body as { stream?: unknown } | null)?.stream === true) {
      // Headers go out with the first chunk; until then a failure is an ordinary HTTP error.
      await writeEventStream(res, this.chat.stream(caller, body), (error) => this.inStreamError(error, req));
      return;
    }
    const clientGone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) clientGone.abort();
    });
    const idempotencyKey = req.header('Idempotency-Key');
    if (idempotencyKey === undefined) {
      res.status(200).json(await this.chat.complete(caller, body, clientGone.signal));
      return;
    }
    const claim = { workspaceId: principal.workspaceId, requestId: req.id, key: idempotencyKey };
    const { response, replayed } = await this.idempotency.run(claim, body, () => this.chat.complete(caller, body, clientGone.signal));
    if (replayed) res.setHeader('Idempotent-Replayed', 'true');
    res.status(200).json(response);
  }

  private inStreamError(error: unknown, req: ApiRequest): ApiError {
    if (error instanceof ApiError) return error;
    if (isDatabaseUnavailable(error)) return databaseUnavailableError();
    this.logger.error(`Stream failed [request ${req.id}]: ${error instanceof Error ? error.stack : String(error)}`);
    return new ApiError('internal_error', `The server had an error while streaming (request ${req.id}).`);
  }
}
