import type { FileSearchOptions, FileSearchResult } from './documents.service';

/**
 * What `file_search` needs of the documents: the passages of an assistant's documents that
 * best match a query, and their rendering for the model. Declared here, beside the
 * documents, and provided by DocumentsModule (DocumentsService implements it), so the tool
 * depends on this narrow port and a test can hand it a plain fake.
 */
export abstract class DocumentSearch {
  abstract search(assistantId: string, query: string, options: FileSearchOptions): Promise<FileSearchResult[]>;
  abstract formatResultsForModel(results: FileSearchResult[], numbers?: ReadonlyArray<number | undefined>): string;
}
