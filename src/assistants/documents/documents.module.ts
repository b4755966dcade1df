import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { ModelsModule } from '../../models/models.module';
import { ProvidersModule } from '../../providers/providers.module';
import { UsageModule } from '../../usage/usage.module';
import { WalletModule } from '../../wallet/wallet.module';
import { WorkspacesModule } from '../../workspaces/workspaces.module';
import { Assistant } from '../entities/assistant.entity';
import { DenseSearch } from './dense-search';
import { DocumentEmbeddings } from './document-embeddings';
import { DocumentFilters } from './document-filters';
import { DocumentReader } from './document-reader';
import { DocumentSearch } from './document-search';
import { DocumentsService } from './documents.service';
import { DocumentChunk } from './entities/document-chunk.entity';
import { Document } from './entities/document.entity';

/**
 * Documents of assistants and the search over them: the documents and document_chunks
 * tables, and a read of the assistants' (the assistants folder owns all three; this module
 * cannot import AssistantsModule, which imports it for the file_search tool). The tier
 * whose limits apply comes from WorkspacesService. Provides the `DocumentSearch` port that
 * the `file_search` tool (FileSearchTool) uses. Chunk embeddings (DocumentEmbeddings) are
 * made through the providers' routing and charged through the wallet, with a usage record;
 * the dense leg of the search (DenseSearch) embeds the query the same way.
 */
@Module({
  imports: [TypeOrmModule.forFeature([Document, DocumentChunk, Assistant]), WorkspacesModule, ModelsModule, ProvidersModule, WalletModule, UsageModule],
  providers: [
    DocumentsService,
    DocumentReader,
    DenseSearch,
    DocumentEmbeddings,
    DocumentFilters,
    // A factory rather than useExisting, so the compiler checks that DocumentsService fits the port.
    { provide: DocumentSearch, useFactory: (documents: DocumentsService): DocumentSearch => documents, inject: [DocumentsService] },
  ],
  exports: [DocumentsService, DocumentSearch, DocumentFilters, DocumentEmbeddings],
})
export class DocumentsModule {}
