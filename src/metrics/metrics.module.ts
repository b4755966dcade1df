import { Global, Module } from '@nestjs/common';
import { MetricsService } from './metrics.service';

/**
 * The metrics registry, global so that any module records into it (providers, billing,
 * wallet, limits). The CLI imports it too, for the modules it shares with the service; what
 * serves `/metrics` is MetricsEndpointModule, the service's only.
 */
@Global()
@Module({ providers: [MetricsService], exports: [MetricsService] })
export class MetricsModule {}
