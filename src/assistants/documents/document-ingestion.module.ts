import { Module } from '@nestjs/common';
import { DocumentIngestion } from './document-ingestion';
import { DocumentsModule } from './documents.module';

/** Background reading of uploaded documents, for the server process (see DocumentIngestion). */
@Module({
  imports: [DocumentsModule],
  providers: [DocumentIngestion],
  exports: [DocumentIngestion, DocumentsModule],
})
export class DocumentIngestionModule {}
