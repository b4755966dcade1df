import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { ModelsModule } from '../models/models.module';
import { ToolsModule } from '../tools/tools.module';
import { WebSearchModule } from '../tools/web-search/web-search.module';
import { WorkspacesModule } from '../workspaces/workspaces.module';
import { ASSISTANT_MODELS } from '../models/assistant-models';
import { AssistantModelEntries } from './assistant-models.provider';
import { AssistantsService } from './assistants.service';
import { DocumentsModule } from './documents/documents.module';
import { Assistant } from './entities/assistant.entity';
import { SERVER_TOOL_CLASSES } from './server-tools';

/**
 * Assistants, and the server tools they can offer: the tools are registered here, with the
 * modules their backends come from, and ToolsService (which runs them) is exported with
 * AssistantsService.
 */
@Module({
  imports: [
    TypeOrmModule.forFeature([Assistant]),
    WorkspacesModule,
    ModelsModule,
    // An assistant whose embedding model changes has its documents embedded again (DocumentEmbeddings).
    DocumentsModule,
    ToolsModule.register({ tools: SERVER_TOOL_CLASSES, imports: [WebSearchModule, DocumentsModule] }),
  ],
  providers: [AssistantsService, { provide: ASSISTANT_MODELS, useClass: AssistantModelEntries }],
  exports: [AssistantsService, ToolsModule, ASSISTANT_MODELS],
})
export class AssistantsModule {}
