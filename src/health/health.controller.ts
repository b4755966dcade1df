import { Controller, Get, HttpCode, HttpStatus, Res } from '@nestjs/common';
import { ApiOperation, ApiResponse, ApiTags } from '@nestjs/swagger';
import { InjectDataSource } from '@nestjs/typeorm';
import type { Response } from 'express';
import { DataSource } from 'typeorm';
import { Public } from '../common/auth/auth.decorators';
import { ServerDrain } from '../common/http/server-drain';

/** Probes for load balancers and orchestrators: no key, no rate limit. */
@ApiTags('Health')
@Public()
@Controller('health')
export class HealthController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
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
    description: 'From the moment the process receives SIGTERM it answers 503 (`database: "not checked"`), so that balancers stop sending it requests.',
  })
  @ApiResponse({ status: 200, schema: { example: { status: 'ok', database: 'up' } } })
  @ApiResponse({ status: 503, schema: { example: { status: 'unavailable', database: 'down' } } })
  async ready(@Res({ passthrough: true }) res: Response): Promise<{ status: string; database: string }> {
    if (this.drain.draining) {
      res.status(HttpStatus.SERVICE_UNAVAILABLE);
      return { status: 'shutting_down', database: 'not checked' };
    }
    try {
      await this.dataSource.query('SELECT 1');
      return { status: 'ok', database: 'up' };
    } catch {
      res.status(HttpStatus.SERVICE_UNAVAILABLE);
      return { status: 'unavailable', database: 'down' };
    }
  }
}
