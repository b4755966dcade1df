import { Body, Controller, HttpCode, Logger, Post, Req, Res, UseFilters } from '@nestjs/common';
import { ApiBody, ApiOperation, ApiProduces, ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import { clientGone } from '../common/http/client-gone.decorator';
import { Idempotent } from '../common/http/idempotent.decorator';
import type { ApiRequest, Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { ChatRefusalFilter } from './chat-refusal.filter';
import { apiCaller, ChatService } from './chat.service';
import type { ChatCompletionResponse } from './completion-types';
import { ChatCompletionRequestDto } from './dto/chat-completion-request.dto';
import { ChatCompletionResponseDto } from './dto/chat-completion-response.dto';
import { inStreamError, isStreamRequest, writeEventStream } from './sse';

@ApiTags('Chat')
@UseFilters(ChatRefusalFilter)
@Controller('v1/chat')
export class ChatController {
  private readonly logger = new Logger('Chat');

  constructor(private readonly chat: ChatService) {}

  @Post('completions')
  @HttpCode(200)
  @ApiOperation({
    summary: 'Create a chat completion',
    description:
      'OpenAI Chat Completions, plain or streamed (`stream: true` answers Server-Sent Events ending with `data: [DONE]`). ' +
      'Direct mode names a `model`. The response adds `x_service` (cost in millicents, iterations, tools used). ' +
      'Money for the request is held from the wallet while it runs and the exact cost is charged when it ends.',
  })
  @ApiBody({ type: ChatCompletionRequestDto })
  @Idempotent({
    when: (req) => !isStreamRequest(req.body),
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
    // Passthrough: the JSON answer is returned, so that interceptors (idempotency) see it.
    @Res({ passthrough: true }) res: Response,
  ): Promise<ChatCompletionResponse | undefined> {
    const caller = apiCaller(principal, req);
    if (isStreamRequest(body)) {
      // Written here, event by event; headers go out with the first chunk, until then a
      // failure is an ordinary HTTP error. Nest's reply afterwards finds the response over.
      await writeEventStream(res, this.chat.stream(caller, body), (error) => inStreamError(error, req.id, this.logger));
      return undefined;
    }
    return this.chat.complete(caller, body, clientGone(res));
  }

}

