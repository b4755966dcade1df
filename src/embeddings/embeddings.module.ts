import { Module } from '@nestjs/common';
import { BillingModule } from '../billing/billing.module';
import { ServerDrainModule } from '../common/http/server-drain.module';
import { ModelsModule } from '../models/models.module';
import { ProvidersModule } from '../providers/providers.module';
import { EmbeddingsRefusalFilter } from './embeddings-refusal.filter';
import { EmbeddingsController } from './embeddings.controller';
import { EmbeddingsService } from './embeddings.service';

/** `POST /v1/embeddings`: OpenAI's Embeddings API on the billing of chat requests and the routing of providers. */
@Module({
  imports: [ModelsModule, ProvidersModule, BillingModule, ServerDrainModule],
  controllers: [EmbeddingsController],
  providers: [EmbeddingsService, EmbeddingsRefusalFilter],
  exports: [EmbeddingsService],
})
export class EmbeddingsModule {}
