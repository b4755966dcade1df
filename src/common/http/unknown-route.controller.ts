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
    throw ApiError.notFound(`Unknown request URL: ${req.method} ${req.path}.`, 'unknown_url');
  }
}
