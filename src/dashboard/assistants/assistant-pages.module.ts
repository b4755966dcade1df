import { MiddlewareConsumer, Module, NestModule, RequestMethod } from '@nestjs/common';
import { DocumentIngestionModule } from '../../assistants/documents/document-ingestion.module';
import { DocumentUploadParser } from './document-upload';
import { DocumentsPanel } from './documents-panel';

/**
 * What the assistants' pages need beside the dashboard's own services: documents read in
 * the background (DocumentIngestion, with its sweeper), the documents panel, and the
 * multipart parser of uploads, which must run before DashboardGuard (see DocumentUploadParser).
 * The controllers are DashboardModule's, where PagesService and the guard live.
 */
@Module({
  imports: [DocumentIngestionModule],
  providers: [DocumentsPanel],
  exports: [DocumentsPanel, DocumentIngestionModule],
})
export class AssistantPagesModule implements NestModule {
  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(DocumentUploadParser).forRoutes({ path: 'w/:workspaceId/assistants/:assistantId/documents', method: RequestMethod.POST });
  }
}
