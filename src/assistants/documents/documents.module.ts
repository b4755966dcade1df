import { Module } from '@nestjs/common';
import { DocumentsService } from './documents.service';

/**
 * Documents of assistants and `file_search` over them. Needs only the data source
 * (TypeOrmModule.forRoot) with `Document` and `DocumentChunk` among its entities.
 */
@Module({
  providers: [DocumentsService],
  exports: [DocumentsService],
})
export class DocumentsModule {}
