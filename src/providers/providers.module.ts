import { Module } from '@nestjs/common';
import { ModelsModule } from '../models/models.module';
import { MetricsModule } from '../metrics/metrics.module';
import { ProvidersService } from './providers.service';

@Module({
  imports: [ModelsModule, MetricsModule],
  providers: [ProvidersService],
  exports: [ProvidersService],
})
export class ProvidersModule {}
