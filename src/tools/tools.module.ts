import { Module } from '@nestjs/common';
import { DocumentsModule } from '../assistants/documents/documents.module';
import { ToolsService } from './tools.service';
import { WebSearchModule } from './web-search';

/** The server-side tools of assistants: web_search and file_search. */
@Module({
  imports: [WebSearchModule, DocumentsModule],
  providers: [ToolsService],
  exports: [ToolsService],
})
export class ToolsModule {}
