import { All, Controller, Req } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { ApiError } from '../errors/api-error';
import type { ApiRequest } from './request-context';

/**
 * Registered last: an unknown `/v1` path goes through authentication and rate limiting
 * like any API route (so it carries the rate-limit headers) before its 404.
 */
@ApiExcludeController()
@Controller('v1')
export class UnknownRouteController {
  @All('*path')
  unknown(@Req() req: ApiRequest): never {
    // Clients that default to the Responses API (newer SDKs, agents) are told what to use instead.
    if (req.path === '/v1/responses' || req.path.startsWith('/v1/responses/')) {
      throw ApiError.notFound(
        `This service does not implement the Responses API yet (${req.method} ${req.path}); use POST /v1/chat/completions.`,
        'responses_api_not_supported',
      );
    }
    throw ApiError.notFound(`Unknown request URL: ${req.method} ${req.path}.`, 'unknown_url');
  }
}
