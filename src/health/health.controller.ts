import { Controller, Get, HttpCode, HttpStatus, Res } from '@nestjs/common';
import { ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import type { Response } from 'express';
import { Public } from '../common/auth/auth.decorators';
import { ServerDrain } from '../common/http/server-drain';
import { DatabaseProbe } from './database-probe';

/** Probes for load balancers and orchestrators: no key, no rate limit. */
@ApiTags('Health')
@Public()
@Controller('health')
export class HealthController {
  constructor(
    private readonly database: DatabaseProbe,
    private readonly drain: ServerDrain,
  ) {}

  @Get()
  @HttpCode(HttpStatus.OK)
  @ApiOperation({ summary: 'Liveness: the process answers' })
  @ApiResponse({ status: 200, schema: { example: { status: 'ok' } } })
  live(): { status: 'ok' } {
    return { status: 'ok' };
  }

  @Get('ready')
  @ApiOperation({
    summary: 'Readiness: the database answers and the process is not stopping',
    description:
      'Answers within a second whatever the database does: 503 (`database: "down"`) when PostgreSQL does not answer `SELECT 1` within 500 ms (stopped, frozen, unreachable). From the moment the process receives SIGTERM it answers 503 (`database: "not checked"`), so that balancers stop sending it requests.',
  })
  @ApiResponse({ status: 200, schema: { example: { status: 'ok', database: 'up' } } })
  @ApiResponse({ status: 503, schema: { example: { status: 'unavailable', database: 'down' } } })
  async ready(@Res({ passthrough: true }) res: Response): Promise<{ status: string; database: string }> {
    if (this.drain.draining) {
      res.status(HttpStatus.SERVICE_UNAVAILABLE);
      return { status: 'shutting_down', database: 'not checked' };
    }
    if (await this.database.answers()) return { status: 'ok', database: 'up' };
    res.status(HttpStatus.SERVICE_UNAVAILABLE);
    return { status: 'unavailable', database: 'down' };
  }
}
