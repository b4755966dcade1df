import { Injectable } from '@nestjs/common';
import { DOCUMENT_LIMITS, formatBytes, MAX_FILE_BYTES } from '../../assistants/documents/document-limits';
import { DocumentsService } from '../../assistants/documents/documents.service';
import { SUPPORTED_EXTENSIONS } from '../../assistants/documents/extract-text';
import type { Assistant } from '../../assistants/entities/assistant.entity';
import { UNLIMITED } from '../../limits/tier-policy';
import type { Flash, PageRequest } from '../page-request';
import { documentRow, DocumentRow } from './assistant-form';
import { MAX_FILES_PER_UPLOAD, MAX_UPLOAD_BYTES } from './document-upload';

/** What the documents panel of an assistant's editor shows (partials/document-list and the upload form). */
export interface DocumentsPanelData {
  assistantId: string;
  documents: DocumentRow[];
  /** While any document is processing, the list asks for itself again every 2 s. */
  processing: boolean;
  fileSearchOn: boolean;
  canManage: boolean;
  /** "3 of 20 documents, 1.2 MB of 25 MB" for the workspace (limits are per workspace). */
  usage: string;
  accept: string;
  rules: string;
  /** Messages about the last upload or deletion, shown in the panel (htmx answers have no flash). */
  messages: Flash[];
  /** The assistant's chunk size / overlap, as the rows show theirs. */
  chunking: string;
  ready: number;
  /** Ready documents split with other settings than the assistant's: a re-index would change them. */
  stale: number;
}

/** Builds the documents panel, for the editor page and for the fragment that htmx polls and swaps. */
@Injectable()
export class DocumentsPanel {
  constructor(private readonly documents: DocumentsService) {}

  async data(req: PageRequest, assistant: Assistant, canManage: boolean, messages: Flash[] = []): Promise<DocumentsPanelData> {
    const [documents, usage] = await Promise.all([this.documents.list(assistant.id), this.documents.usage(req.member!.id)]);
    const limits = DOCUMENT_LIMITS[req.member!.tier];
    const count = limits.maxDocuments === UNLIMITED ? `${usage.documents} documents` : `${usage.documents} of ${limits.maxDocuments} documents`;
    const bytes = limits.maxTotalBytes === UNLIMITED ? formatBytes(usage.bytes) : `${formatBytes(usage.bytes)} of ${formatBytes(limits.maxTotalBytes)}`;
    const rows = documents.map(documentRow);
    const chunking = `${assistant.chunkMaxTokens} / ${assistant.chunkOverlapTokens}`;
    const ready = rows.filter((row) => row.status === 'ready');
    return {
      assistantId: assistant.id,
      documents: rows,
      chunking,
      ready: ready.length,
      stale: ready.filter((row) => row.chunking !== chunking).length,
      processing: documents.some((document) => document.status === 'processing'),
      fileSearchOn: assistant.tools.some((tool) => tool.type === 'file_search'),
      canManage,
      usage: `This workspace stores ${count}, ${bytes} (the ${req.member!.tier} tier's limits, over all its assistants).`,
      accept: SUPPORTED_EXTENSIONS.join(','),
      rules:
        `PDF, DOCX, TXT, Markdown or HTML; up to ${MAX_FILES_PER_UPLOAD} files at a time, ` +
        `${formatBytes(MAX_FILE_BYTES)} each, ${formatBytes(MAX_UPLOAD_BYTES)} in all.`,
      messages,
    };
  }
}
