import { Module } from '@nestjs/common';
import { MetricsController } from './metrics.controller';
import { MetricsModule } from './metrics.module';
import { MetricsServer } from './metrics.server';

/** `/metrics`, behind METRICS_TOKEN on the service's port or on METRICS_PORT: the service's only (not the CLI's). */
@Module({ imports: [MetricsModule], controllers: [MetricsController], providers: [MetricsServer] })
export class MetricsEndpointModule {}
