import { Module } from '@nestjs/common';
import { DocumentSearch } from '../../tools/tools.service';
import { DocumentsService } from './documents.service';

/**
 * Documents of assistants and `file_search` over them. Needs only the data source
 * (TypeOrmModule.forRoot) with `Document` and `DocumentChunk` among its entities. Provides
 * itself as the tools' `DocumentSearch`.
 */
@Module({
  providers: [DocumentsService, { provide: DocumentSearch, useExisting: DocumentsService }],
  exports: [DocumentsService, DocumentSearch],
})
export class DocumentsModule {}
