import { Body, Controller, HttpCode, Post, Req, Res, UseFilters } from '@nestjs/common';
import { ApiBody, ApiOperation, ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import { clientGone } from '../common/http/client-gone.decorator';
import { Idempotent } from '../common/http/idempotent.decorator';
import type { ApiRequest, Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { CreateEmbeddingRequestDto, CreateEmbeddingResponseDto } from './dto/embeddings.dto';
import { EmbeddingsRefusalFilter } from './embeddings-refusal.filter';
import { EmbeddingsResponse, EmbeddingsService } from './embeddings.service';

@ApiTags('Embeddings')
@UseFilters(EmbeddingsRefusalFilter)
@Controller('v1/embeddings')
export class EmbeddingsController {
  constructor(private readonly embeddings: EmbeddingsService) {}

  @Post()
  @HttpCode(200)
  @ApiOperation({
    summary: 'Create embeddings',
    description:
      'OpenAI Embeddings (`client.embeddings.create`): one vector per input, of the model\'s size or of `dimensions`, as numbers or base64 ' +
      '(`encoding_format`). The inputs\' tokens are held from the wallet at the model\'s input price while the request runs, and ' +
      '`usage.prompt_tokens` times that price is charged when it ends (`x_service.cost_millicents`); a failed request is not charged.',
  })
  @ApiBody({ type: CreateEmbeddingRequestDto })
  @Idempotent({ scope: 'embeddings.create' })
  @ApiStandardResponses({ ok: CreateEmbeddingResponseDto, errors: [400, 402, 403, 404, 409, 413, 415, 502, 503, 504] })
  create(
    @CurrentPrincipal() principal: Principal,
    // Validated by the service, so that refused requests get a usage record too.
    @Body() body: unknown,
    @Req() req: ApiRequest,
    @Res({ passthrough: true }) res: Response,
  ): Promise<EmbeddingsResponse> {
    return this.embeddings.create({ principal, requestId: req.id, idempotent: req.headers['idempotency-key'] !== undefined }, body, clientGone(res));
  }
}
