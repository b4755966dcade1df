import { DynamicModule, Module, Type } from '@nestjs/common';
import { ModelsController } from './models.controller';
import { ModelsModule } from './models.module';

/**
 * `GET /v1/models`: the catalog, and the workspace's assistants from the module that
 * provides ASSISTANT_MODELS (the assistants module). The app passes that module in, so
 * models/ does not import assistants/ (which imports models/ for the catalog).
 */
@Module({})
export class ModelsApiModule {
  static register(assistantModels: Type<unknown>): DynamicModule {
    return { module: ModelsApiModule, imports: [ModelsModule, assistantModels], controllers: [ModelsController] };
  }
}
