import { Get, NotFoundException, Param, Post, Req, Res } from '@nestjs/common';
import { isUUID } from 'class-validator';
import type { Response } from 'express';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { AssistantsService } from '../../assistants/assistants.service';
import { DocumentIngestion } from '../../assistants/documents/document-ingestion';
import { DocumentsService } from '../../assistants/documents/documents.service';
import type { Assistant } from '../../assistants/entities/assistant.entity';
import { ApiError } from '../../common/errors/api-error';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import { csrf } from '../dashboard.setup';
import type { Flash, PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { DocumentUploads, MAX_FILES_PER_UPLOAD, UploadRequest } from './document-upload';
import { DocumentsPanel } from './documents-panel';

/**
 * The documents of an assistant, in its editor: upload (several files at once; each is
 * stored at once and read in the background, so a large PDF does not hold the page),
 * the list that htmx polls while something is processing, and removal. A plain form post
 * gets a redirect to the editor; a script's request (htmx, or assistants.js uploading with
 * a progress bar) gets the panel's new HTML.
 */
@DashboardController('w/:workspaceId/assistants/:assistantId/documents')
export class DocumentsController {
  constructor(
    private readonly pages: PagesService,
    private readonly assistants: AssistantsService,
    private readonly documents: DocumentsService,
    private readonly ingestion: DocumentIngestion,
    private readonly panel: DocumentsPanel,
    private readonly uploads: DocumentUploads,
  ) {}

  @Get()
  @RequireRole('member')
  async list(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string): Promise<void> {
    const assistant = await this.find(req, assistantId);
    // The fragment is for htmx; a person who opens its address gets the editor, at the documents.
    if (!isScripted(req)) return this.pages.redirect(req, res, `/w/${req.member!.id}/assistants/${assistant.id}#documents`);
    await this.sendPanel(req, res, assistant, []);
  }

  /**
   * Each file is accepted or refused on its own (type, size, the tier's limits): the answer
   * says which. The body is read only here, after the guard let the request through.
   */
  @Post()
  @RequireRole('admin')
  async upload(@Req() req: UploadRequest, @Res() res: Response, @Param('assistantId') assistantId: string): Promise<void> {
    const assistant = await this.find(req, assistantId);
    const received = await this.uploads.receive(req, res, req.member!.id);
    const messages: Flash[] = [];
    let refusedStatus = 400;
    if ('refusal' in received) {
      messages.push({ kind: 'error', text: received.refusal });
      refusedStatus = received.status;
      if (received.retryAfterSeconds) res.setHeader('Retry-After', String(received.retryAfterSeconds));
    } else if (received.files.length === 0) messages.push({ kind: 'error', text: 'Choose one or more files to upload.' });
    else if (received.files.length > MAX_FILES_PER_UPLOAD) {
      messages.push({ kind: 'error', text: `Upload at most ${MAX_FILES_PER_UPLOAD} files at a time (you chose ${received.files.length}).` });
    } else {
      const accepted: string[] = [];
      for (const file of received.files) {
        try {
          const document = await this.documents.enqueue({
            workspaceId: req.member!.id,
            assistantId: assistant.id,
            fileName: file.name,
            data: file.data,
            mimeType: file.mimeType,
          });
          this.ingestion.start(document.id);
          accepted.push(document.name);
        } catch (error) {
          if (!(error instanceof ApiError) || error.status >= 500) throw error;
          messages.push({ kind: 'error', text: error.message });
        }
      }
      if (accepted.length > 0) {
        messages.unshift({
          kind: 'success',
          text: `Uploaded ${accepted.join(', ')}: ${accepted.length === 1 ? 'it is' : 'they are'} being read; the list shows when ${accepted.length === 1 ? 'it is' : 'they are'} ready.`,
        });
      }
    }
    const failed = messages.every((message) => message.kind === 'error');
    if (!isScripted(req)) {
      for (const message of messages) this.pages.flash(req, message);
      return this.pages.redirect(req, res, `/w/${req.member!.id}/assistants/${assistant.id}#documents`);
    }
    await this.sendPanel(req, res, assistant, messages, failed ? refusedStatus : 200);
  }

  /** Splits the assistant's documents again with its chunk settings (DocumentsService.reindex), while the page waits. */
  @Post('reindex')
  @RequireRole('admin')
  async reindex(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string): Promise<void> {
    const assistant = await this.find(req, assistantId);
    const result = await this.documents.reindex(assistant.id);
    const message: Flash = {
      kind: 'success',
      text:
        `Re-indexed ${result.documents} document${result.documents === 1 ? '' : 's'} into ${result.chunks} chunks ` +
        `of at most ${result.chunk_max_tokens} tokens (${result.chunk_overlap_tokens} of overlap).`,
    };
    if (!isScripted(req)) return this.pages.redirect(req, res, `/w/${req.member!.id}/assistants/${assistant.id}#documents`, message);
    await this.sendPanel(req, res, assistant, [message]);
  }

  @Post(':documentId/delete')
  @RequireRole('admin')
  async remove(
    @Req() req: PageRequest,
    @Res() res: Response,
    @Param('assistantId') assistantId: string,
    @Param('documentId') documentId: string,
  ): Promise<void> {
    const assistant = await this.find(req, assistantId);
    if (!isUUID(documentId)) throw new NotFoundException();
    const document = await this.documents.getInWorkspace(req.member!.id, documentId).catch(notFoundPage);
    if (document.assistantId !== assistant.id) throw new NotFoundException();
    await this.documents.remove(req.member!.id, document.id).catch(notFoundPage);
    const message: Flash = { kind: 'success', text: `Deleted ${document.name}: the assistant no longer finds its passages.` };
    if (!isScripted(req)) return this.pages.redirect(req, res, `/w/${req.member!.id}/assistants/${assistant.id}#documents`, message);
    await this.sendPanel(req, res, assistant, [message]);
  }

  private async sendPanel(req: PageRequest, res: Response, assistant: Assistant, messages: Flash[], status = 200): Promise<void> {
    const panel = await this.panel.data(req, assistant, roleAtLeast(req.member!.role, 'admin'), messages);
    const html = await this.pages.fragment('partials/document-list', {
      base: req.basePath ?? '',
      member: req.member,
      // The forms' fallback without JavaScript; htmx sends the token from <body hx-headers>.
      csrfToken: csrf.generateToken(req),
      panel,
    });
    res.status(status).type('html').setHeader('Cache-Control', 'no-store').send(html);
  }

  private async find(req: PageRequest, assistantId: string): Promise<Assistant> {
    if (!isUUID(assistantId)) throw new NotFoundException();
    return this.assistants.resolve(req.member!.id, assistantId).catch(notFoundPage);
  }
}

/** htmx sends HX-Request; assistants.js's upload with progress sends X-Requested-With. */
function isScripted(req: PageRequest): boolean {
  return req.headers['hx-request'] === 'true' || req.headers['x-requested-with'] === 'XMLHttpRequest';
}

function notFoundPage(error: unknown): never {
  if (error instanceof ApiError && error.status === 404) throw new NotFoundException();
  throw error;
}
