import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { DocumentEmbeddings } from './document-embeddings';
import { DocumentsService } from './documents.service';
import type { DocumentStatus } from './entities/document.entity';

/** How often abandoned documents are looked for, unless the lease is shorter than twice this. */
const SWEEP_EVERY_MS = 30_000;
/** On shutdown, how long to let documents being read finish; the rest are taken up again after their lease. */
const SHUTDOWN_WAIT_MS = 10_000;

/**
 * Reads uploaded documents in the background of the server process: `start` right after an
 * upload is stored, and every 30 seconds a sweep takes up documents whose reader stopped
 * (a crash or restart leaves them `processing` with a lease that runs out), so nothing
 * uploaded is lost or left processing for ever. Once a document's chunks are stored, the same
 * reader embeds them when its assistant has an embedding model (DocumentEmbeddings); the
 * sweep also takes up documents whose embeddings are due and nobody makes (a failed
 * embeddings call, a restart, a model changed). Not part of DocumentsModule, so that the
 * CLI, which adds documents in the foreground, runs no sweeper.
 */
@Injectable()
export class DocumentIngestion implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('DocumentIngestion');
  private readonly reading = new Map<string, Promise<void>>();
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  private sweeper: NodeJS.Timeout | undefined;

  constructor(
    private readonly documents: DocumentsService,
    private readonly embeddings: DocumentEmbeddings,
  ) {}

  onApplicationBootstrap(): void {
    // Within half a lease of a reader's death, so that a short lease (tests) is taken up soon.
    const every = Math.min(SWEEP_EVERY_MS, (this.documents.leaseSeconds * 1000) / 2);
    let sweeping = false;
    this.sweeper = setInterval(() => {
      // A sweep reads what it takes up: the next one waits for it rather than overlapping.
      if (sweeping) return;
      sweeping = true;
      void this.sweep().finally(() => (sweeping = false));
    }, every).unref();
  }

  /** Starts reading the document now, without waiting; this process must hold its lease. */
  start(documentId: string): void {
    if (this.reading.has(documentId)) return;
    const work = this.read(documentId).finally(() => this.reading.delete(documentId));
    this.reading.set(documentId, work);
  }

  /**
   * Takes up every abandoned document there is, one after another (those read too many
   * times already become `failed` instead: DocumentsService.claimAbandoned). Returns how many were taken.
   */
  async sweep(): Promise<number> {
    let taken = 0;
    try {
      for (let id = await this.documents.claimAbandoned(); id; id = await this.documents.claimAbandoned()) {
        taken++;
        this.logger.warn(`Taking up document ${id}, left processing by a reader that stopped`);
        this.start(id);
        await this.reading.get(id);
      }
      for (let id = await this.embeddings.claimDue(); id; id = await this.embeddings.claimDue()) {
        taken++;
        await this.embed(id);
      }
    } catch (error) {
      this.logger.error(`Sweeping documents left processing failed: ${String(error)}`);
    }
    return taken;
  }

  /** Resolves when the documents being read now are done (for tests and shutdown). */
  async idle(): Promise<void> {
    while (this.reading.size > 0) await Promise.allSettled([...this.reading.values()]);
  }

  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.sweeper);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, SHUTDOWN_WAIT_MS).unref()));
    await Promise.race([this.idle(), timeout]);
    clearTimeout(timer);
  }

  /**
   * A reading slot, DOCUMENT_READERS of them: each document is read in a worker thread that
   * may use up to DOCUMENT_READ_MEMORY_MB, and ten files uploaded together must not start ten
   * (nor hold ten files in memory). A waiter is handed the slot of the reader that ends, so
   * there are never more.
   */
  private async acquire(): Promise<void> {
    if (this.active < this.documents.readers) {
      this.active++;
      return;
    }
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  /**
   * Embeds a document's chunks under its embedding lease (renewed meanwhile). A failure is
   * logged and the lease left to run out: a later sweep tries again, and the batches already
   * settled are neither called for nor charged again.
   */
  private async embed(documentId: string): Promise<void> {
    const renew = setInterval(() => {
      this.embeddings.renewLease(documentId).catch((error: unknown) => this.logger.warn(`Renewing the embedding lease of ${documentId}: ${String(error)}`));
    }, (this.documents.leaseSeconds * 1000) / 4).unref();
    try {
      await this.embeddings.embed(documentId);
    } catch (error) {
      this.logger.warn(`Embedding the chunks of document ${documentId} failed; a sweep tries again once its lease runs out: ${String(error)}`);
    } finally {
      clearInterval(renew);
    }
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.active--;
  }

  private async read(documentId: string): Promise<void> {
    await this.acquire();
    const renew = setInterval(() => {
      this.documents.renewLease(documentId).catch((error: unknown) => this.logger.warn(`Renewing the lease of ${documentId}: ${String(error)}`));
    }, (this.documents.leaseSeconds * 1000) / 4).unref();
    let status: DocumentStatus | null = null;
    try {
      // The lease may have run low while waiting for a slot.
      await this.documents.renewLease(documentId);
      status = await this.documents.ingest(documentId);
      if (status === 'failed') this.logger.log(`Document ${documentId} could not be read`);
    } catch (error) {
      // The database went away mid-way: the lease runs out and a sweep takes the document up again.
      this.logger.error(`Reading document ${documentId} failed: ${String(error)}`);
    } finally {
      clearInterval(renew);
      this.release();
    }
    // Outside the reading slot: a slow embeddings upstream must not hold up the reading of other uploads.
    if (status === 'ready') await this.embed(documentId);
  }
}
