import { Module } from '@nestjs/common';
import { DocumentSearch } from './document-search';
import { DocumentsService } from './documents.service';

/**
 * Documents of assistants and the search over them. Needs only the data source
 * (TypeOrmModule.forRoot) with `Document` and `DocumentChunk` among its entities. Provides
 * the `DocumentSearch` port that the `file_search` tool (FileSearchTool) uses.
 */
@Module({
  providers: [
    DocumentsService,
    // A factory rather than useExisting, so the compiler checks that DocumentsService fits the port.
    { provide: DocumentSearch, useFactory: (documents: DocumentsService): DocumentSearch => documents, inject: [DocumentsService] },
  ],
  exports: [DocumentsService, DocumentSearch],
})
export class DocumentsModule {}
