import { MiddlewareConsumer, Module, NestModule, RequestMethod } from '@nestjs/common';
import { DocumentIngestionModule } from '../../assistants/documents/document-ingestion.module';
import { DocumentUploads, UploadTokenReader } from './document-upload';
import { DocumentsPanel } from './documents-panel';

/**
 * What the assistants' pages need beside the dashboard's own services: documents read in
 * the background (DocumentIngestion, with its sweeper), the documents panel, and uploads:
 * their CSRF token read before DashboardGuard (see UploadTokenReader), their body only after it.
 * The controllers are DashboardModule's, where PagesService and the guard live.
 */
@Module({
  imports: [DocumentIngestionModule],
  providers: [DocumentsPanel, DocumentUploads],
  exports: [DocumentsPanel, DocumentUploads, DocumentIngestionModule],
})
export class AssistantPagesModule implements NestModule {
  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(UploadTokenReader).forRoutes({ path: 'w/:workspaceId/assistants/:assistantId/documents', method: RequestMethod.POST });
  }
}
