import { Module } from '@nestjs/common';
import { MetricsService } from './metrics.service';

/**
 * The metrics registry: each module that records into it (providers, chat billing, wallet,
 * limits) imports this module, and Nest makes one registry for all of them. What serves
 * `/metrics` is MetricsEndpointModule, the service's only (the CLI records, nothing reads).
 */
@Module({ providers: [MetricsService], exports: [MetricsService] })
export class MetricsModule {}
