import { Module } from '@nestjs/common';
import { ModelsModule } from '../models/models.module';
import { AssistantsService } from './assistants.service';

@Module({
  imports: [ModelsModule],
  providers: [AssistantsService],
  exports: [AssistantsService],
})
export class AssistantsModule {}
