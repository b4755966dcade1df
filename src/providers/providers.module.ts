import { Module } from '@nestjs/common';
import { ModelsModule } from '../models/models.module';
import { ProvidersService } from './providers.service';

@Module({
  imports: [ModelsModule],
  providers: [ProvidersService],
  exports: [ProvidersService],
})
export class ProvidersModule {}
