import { Controller, Get, Headers, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Response } from 'express';
import { Public } from '../common/auth/auth.decorators';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { checkMetricsAccess } from './metrics-access';
import { MetricsService } from './metrics.service';

/**
 * `GET /metrics` on the service's own port, behind METRICS_TOKEN. Public to the API-key guard
 * (Prometheus has no API key; the token is checked here). With METRICS_PORT set the metrics
 * are served there instead (MetricsServer), and this route answers 404.
 */
@ApiExcludeController()
@Public()
@Controller('metrics')
export class MetricsController {
  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly metrics: MetricsService,
  ) {}

  @Get()
  async scrape(@Headers('authorization') authorization: string | undefined, @Res() res: Response): Promise<void> {
    if (this.config.metrics.port !== undefined) {
      throw new ApiError('not_found', `Metrics are served on port ${this.config.metrics.port} (METRICS_PORT).`, { code: 'not_found' });
    }
    checkMetricsAccess(this.config.metrics, authorization, false);
    const { contentType, body } = await this.metrics.exposition();
    res.status(200).type(contentType).send(body);
  }
}
