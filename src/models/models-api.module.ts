import { Module } from '@nestjs/common';
import { AssistantsModule } from '../assistants/assistants.module';
import { ModelsController } from './models.controller';
import { ModelsModule } from './models.module';

/**
 * `GET /v1/models`: the catalog and the workspace's assistants. Apart from ModelsModule,
 * which the assistants module itself needs for the catalog.
 */
@Module({
  imports: [ModelsModule, AssistantsModule],
  controllers: [ModelsController],
})
export class ModelsApiModule {}
