import { Body, Controller, Delete, Get, HttpCode, Logger, Param, Post, Query, Req, Res, UseFilters } from '@nestjs/common';
import { ApiBody, ApiOperation, ApiParam, ApiProduces, ApiQuery, ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import { apiCaller } from '../chat/chat.service';
import { inStreamError, isStreamRequest, writeEventStream } from '../chat/sse';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import { ApiError } from '../common/errors/api-error';
import type { Cancellation } from '../common/cancellation';
import { ClientGone } from '../common/http/client-gone.decorator';
import { Idempotent } from '../common/http/idempotent.decorator';
import type { ApiRequest, Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { CreateResponseRequestDto } from './dto/create-response.dto';
import { DeletedResponseDto, InputItemListDto, ResponseObjectDto } from './dto/responses.dto';
import type { ResponseObject } from './response-object';
import { ResponsesRefusalFilter } from './responses-refusal.filter';
import { ResponsesService } from './responses.service';

const ID_PARAM = {
  name: 'id',
  description: "A stored response's id (`resp_...`). Unknown, not stored, or another workspace's: `404` with code `response_not_found`.",
  example: 'resp_6a1f0c...',
};

/** The OpenAI Responses API, translated onto the chat core (see ResponsesService). */
@ApiTags('Responses')
@UseFilters(ResponsesRefusalFilter)
@Controller('v1/responses')
export class ResponsesController {
  private readonly logger = new Logger('Responses');

  constructor(private readonly responses: ResponsesService) {}

  @Post()
  @HttpCode(200)
  @ApiOperation({
    summary: 'Create a response',
    description:
      'OpenAI Responses API, plain or streamed (`stream: true`: Server-Sent Events `response.created`, `response.in_progress`, ' +
      '`response.output_item.added`, `response.content_part.added`, `response.output_text.delta`, ' +
      '`response.function_call_arguments.delta`, their `.done` events, then `response.completed` (`response.incomplete` when cut ' +
      'at max_output_tokens); a failure after the stream started is `response.failed` then an `error` event). Runs through the ' +
      'same core as chat completions: the same hold, exact charge (`x_service`), usage record, rate limit and tool loop, so a ' +
      'request costs what the same chat completion costs. `store` (default true) keeps the turn in a conversation.',
  })
  @ApiBody({ type: CreateResponseRequestDto })
  @Idempotent({
    scope: 'responses.create',
    when: (req) => !isStreamRequest(req.body),
    description:
      'Non-streaming requests: a retry with the same key and body within 24 hours returns the stored response ' +
      '(with `Idempotent-Replayed: true`) and is not charged again. The same key with another body: 409.',
  })
  @ApiProduces('application/json', 'text/event-stream')
  @ApiStandardResponses({ ok: ResponseObjectDto, errors: [400, 402, 404, 409, 413, 415, 502, 503, 504] })
  async create(
    @CurrentPrincipal() principal: Principal,
    // Validated by the service with CreateResponseRequestDto, so that a refused request still gets its usage record.
    @Body() body: unknown,
    @Req() req: ApiRequest,
    @Res({ passthrough: true }) res: Response,
    @ClientGone() clientGone: Cancellation,
  ): Promise<ResponseObject | undefined> {
    const caller = apiCaller(principal, req);
    if (isStreamRequest(body)) {
      const toApiError = (error: unknown) => inStreamError(error, req.id, this.logger);
      await writeEventStream(res, this.responses.stream(caller, body, toApiError), toApiError);
      return undefined;
    }
    return this.responses.create(caller, body, clientGone);
  }

  @Get(':id')
  @ApiOperation({ summary: 'Get a stored response', description: 'A response created with `store: true` (the default), as it was answered.' })
  @ApiParam(ID_PARAM)
  @ApiStandardResponses({ ok: ResponseObjectDto, errors: [404] })
  get(@CurrentPrincipal() principal: Principal, @Param('id') id: string): Promise<ResponseObject> {
    return this.responses.get(principal.workspaceId, id);
  }

  @Get(':id/input_items')
  @ApiOperation({ summary: "List a stored response's input items", description: 'The input items as given (`item_reference`s resolved), each with an id.' })
  @ApiParam(ID_PARAM)
  @ApiQuery({ name: 'order', required: false, enum: ['asc', 'desc'], description: 'Default desc (newest first), as OpenAI.' })
  @ApiQuery({ name: 'limit', required: false, description: '1 to 100, default 20.' })
  @ApiQuery({ name: 'after', required: false, description: 'An item id: list the items after it.' })
  @ApiStandardResponses({ ok: InputItemListDto, errors: [400, 404] })
  async inputItems(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Query() query: Record<string, unknown>,
  ): Promise<InputItemListDto> {
    const order = query.order ?? 'desc';
    if (order !== 'asc' && order !== 'desc') throw ApiError.badRequest('order must be asc or desc.', 'order');
    const limit = query.limit === undefined ? 20 : Number(query.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw ApiError.badRequest('limit must be an integer from 1 to 100.', 'limit');
    const items = await this.responses.inputItems(principal.workspaceId, id);
    const ordered = order === 'asc' ? items : [...items].reverse();
    let start = 0;
    if (query.after !== undefined) {
      start = ordered.findIndex((item) => item.id === query.after) + 1;
      if (start === 0) throw ApiError.badRequest(`No input item '${String(query.after).slice(0, 200)}' in this response.`, 'after');
    }
    const data = ordered.slice(start, start + limit);
    return {
      object: 'list',
      data,
      first_id: data[0]?.id ?? null,
      last_id: data[data.length - 1]?.id ?? null,
      has_more: start + limit < ordered.length,
    };
  }

  @Delete(':id')
  @ApiOperation({
    summary: 'Delete a stored response',
    description:
      'When it was the last response of a conversation created for it (no `conversation` given), the conversation and its messages ' +
      'are deleted with it; a conversation named with `conversation` keeps its turns.',
  })
  @ApiParam(ID_PARAM)
  @ApiStandardResponses({ ok: DeletedResponseDto, errors: [404] })
  delete(@CurrentPrincipal() principal: Principal, @Param('id') id: string): Promise<DeletedResponseDto> {
    return this.responses.delete(principal.workspaceId, id);
  }

}

