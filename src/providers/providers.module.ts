import { Module } from '@nestjs/common';
import { ModelsModule } from '../models/models.module';
import { MetricsModule } from '../metrics/metrics.module';
import { ProvidersService } from './providers.service';
import { DeploymentHealthReporter } from './routing/deployment-health-reporter';

@Module({
  imports: [ModelsModule, MetricsModule],
  providers: [ProvidersService],
  exports: [ProvidersService],
})
export class ProvidersModule {}

/**
 * The replica's deployment health written for the CLI, every 5 s: the server's alone. The CLI
 * gets ProvidersModule (through PaymentsModule) but not this, so it starts no such timer.
 */
@Module({
  imports: [ProvidersModule],
  providers: [DeploymentHealthReporter],
})
export class DeploymentHealthModule {}
