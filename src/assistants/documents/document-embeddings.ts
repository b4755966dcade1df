import { Injectable, Logger } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { Cancellation } from '../../common/cancellation';
import { ApiError } from '../../common/errors/api-error';
import { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import type { ModelDefinition } from '../../models/model-catalog';
import { ModelsService } from '../../models/models.service';
import type { RouteObserver } from '../../providers/provider-adapter';
import { ProvidersService } from '../../providers/providers.service';
import { UsageService } from '../../usage/usage.service';
import { ceilMillicents, llmCost, promptCeiling, toMillicentsNumber } from '../../wallet/cost';
import { WalletService } from '../../wallet/wallet.service';
import type { Workspace } from '../../workspaces/entities/workspace.entity';
import { WorkspacesService } from '../../workspaces/workspaces.service';
import { encodeVector } from './dense-search';
import { Document } from './entities/document.entity';

/** Chunks a batch has: one embeddings call, one hold and one settlement each (OpenAI takes up to 2,048 inputs a call). */
export const EMBEDDING_BATCH = 64;

/**
 * Chunk embeddings, made in the background after a document's chunks are stored (and again
 * when its assistant's embedding model changes), on the money path of `/v1/embeddings`:
 * for each batch of EMBEDDING_BATCH chunks, a hold, the call (routed with failover like
 * any other), and one settlement that charges the workspace, writes the usage record
 * (source `document_embeddings`) and stores the vectors in one transaction. The charge's
 * idempotency key is the document's, its round, the batch's and the model's: a batch
 * embedded twice (two readers after a lease ran out) is charged and stored once. A
 * document is `ready` for lexical search meanwhile; its chunks without a vector are
 * searched by the lexical leg only, until a sweep completes them (DocumentIngestion).
 */
@Injectable()
export class DocumentEmbeddings {
  private readonly logger = new Logger('DocumentEmbeddings');

  constructor(
    @InjectRepository(Document) private readonly documents: Repository<Document>,
    private readonly models: ModelsService,
    private readonly providers: ProvidersService,
    private readonly wallet: WalletService,
    private readonly usage: UsageService,
    private readonly workspaces: WorkspacesService,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  /**
   * An owner's `embedding_model` setting, checked: null (or '') for none, else the id of an
   * embedding model of the catalog; a 400 naming `param` for an unknown model or a chat model.
   */
  checkSetting(id: string | null, param = 'embedding_model'): string | null {
    if (id === null || id === '') return null;
    const model = this.models.find(id);
    if (!model) throw ApiError.badRequest(`${param}: there is no model '${id}'; GET /v1/models lists the embedding models.`, param, 'model_not_found');
    if (model.kind !== 'embedding') {
      throw ApiError.badRequest(`${param}: ${model.id} is a chat model; choose an embedding model (GET /v1/models lists their kinds).`, param, 'wrong_model_kind');
    }
    return model.id;
  }

  /** The catalog's embedding model of that id, or null (none named, or one the catalog no longer has). */
  embeddingModel(id: string | null): ModelDefinition | null {
    const model = id ? this.models.find(id) : undefined;
    return model?.kind === 'embedding' ? model : null;
  }

  /**
   * Sets the workspace's embedding model (checked as `checkSetting`; null: none); when it
   * changes, the documents of its assistants that name none are embedded again.
   */
  async setWorkspaceModel(workspaceId: string, id: string | null, param = 'embedding_model'): Promise<Workspace> {
    const model = this.checkSetting(id, param);
    return this.documents.manager.transaction(async (manager) => {
      const workspace = await this.workspaces.getLocked(manager, workspaceId);
      if (workspace.embeddingModel === model) return workspace;
      workspace.embeddingModel = model;
      await manager.save(workspace);
      const followers = await manager.query<Array<{ id: string }>>(
        'SELECT id FROM assistants WHERE workspace_id = $1 AND embedding_model IS NULL',
        [workspaceId],
      );
      await this.modelChanged(manager, followers.map((row) => row.id));
      return workspace;
    });
  }

  /**
   * Every ready document of these assistants becomes due in a new round (its model changed):
   * a reader embeds it again with the new model, charged anew under new keys.
   */
  async modelChanged(manager: EntityManager, assistantIds: string[]): Promise<void> {
    if (assistantIds.length === 0) return;
    await manager.query(
      `UPDATE documents SET embeddings_due = true, embedding_round = embedding_round + 1, embedding_lease_until = NULL
       WHERE assistant_id = ANY($1::uuid[]) AND status = 'ready'`,
      [assistantIds],
    );
    await manager.query(`UPDATE assistants SET embedding_generation = embedding_generation + 1 WHERE id = ANY($1::uuid[])`, [assistantIds]);
  }

  /**
   * Takes the embedding lease of one due document that nobody is embedding and returns its
   * id, or null. Safe from every process at once.
   */
  async claimDue(): Promise<string | null> {
    const [rows] = (await this.documents.query(
      `UPDATE documents SET embedding_lease_until = now() + make_interval(secs => $1)
       WHERE id = (
         SELECT id FROM documents
         WHERE embeddings_due AND status = 'ready' AND (embedding_lease_until IS NULL OR embedding_lease_until < now())
         ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
       RETURNING id`,
      [this.config.documents.leaseSeconds],
    )) as [Array<{ id: string }>, number];
    return rows[0]?.id ?? null;
  }

  async renewLease(documentId: string): Promise<void> {
    await this.documents.query(
      `UPDATE documents SET embedding_lease_until = now() + make_interval(secs => $2) WHERE id = $1 AND embeddings_due`,
      [documentId, this.config.documents.leaseSeconds],
    );
  }

  /**
   * Embeds the document's chunks that lack its assistant's model, batch after batch, each
   * settled before the next; then the document is no longer due. Throws what stopped it
   * (the upstream failed after failover, the wallet cannot cover a batch): the batches done
   * stay done, and the lease, left to run out, lets a sweep take it up again.
   */
  async embed(documentId: string): Promise<void> {
    const [document] = await this.documents.query<Array<{ workspace_id: string; assistant_id: string; embedding_round: number; model: string | null }>>(
      `SELECT d.workspace_id, d.assistant_id, d.embedding_round, coalesce(a.embedding_model, w.embedding_model) AS model
       FROM documents d JOIN assistants a ON a.id = d.assistant_id JOIN workspaces w ON w.id = d.workspace_id
       WHERE d.id = $1 AND d.status = 'ready' AND d.embeddings_due`,
      [documentId],
    );
    if (!document) return;
    const model = this.embeddingModel(document.model);
    if (document.model && !model) this.logger.warn(`The embedding model ${document.model} of assistant ${document.assistant_id} is not in the catalog: lexical search only`);
    for (;;) {
      const chunks = model ? await this.nextBatch(documentId, document.embedding_round, model.id) : [];
      if (chunks === null) return; // A new round began (the model changed): its reader takes over.
      if (chunks.length === 0) {
        await this.documents.query(
          `UPDATE documents SET embeddings_due = false, embedding_lease_until = NULL WHERE id = $1 AND embedding_round = $2`,
          [documentId, document.embedding_round],
        );
        return;
      }
      await this.embedBatch({ id: documentId, workspaceId: document.workspace_id, assistantId: document.assistant_id, round: document.embedding_round }, model!, chunks);
    }
  }

  /**
   * The chunks of the first batch (positions batch * EMBEDDING_BATCH onwards) that has one
   * without a vector of `model`; empty when none has; null when the document's round moved on.
   */
  private async nextBatch(documentId: string, round: number, model: string): Promise<BatchChunk[] | null> {
    const rows = await this.documents.query<Array<BatchChunk & { current: boolean }>>(
      `WITH first AS (
         SELECT (min(position) / $3) AS batch FROM document_chunks WHERE document_id = $1 AND embedding_model IS DISTINCT FROM $2)
       SELECT c.id::text AS id, c.position, c.content, c.tokens, first.batch::int AS batch, d.embedding_round = $4 AS current
       FROM first JOIN documents d ON d.id = $1
       LEFT JOIN document_chunks c ON c.document_id = $1 AND c.position / $3 = first.batch AND c.embedding_model IS DISTINCT FROM $2
       ORDER BY c.position`,
      [documentId, model, EMBEDDING_BATCH, round],
    );
    if (rows.length > 0 && !rows[0].current) return null;
    return rows.filter((row) => row.id !== null);
  }

  /** One batch: hold, call, and the settlement that charges it and stores its vectors, at most once per key. */
  private async embedBatch(document: { id: string; workspaceId: string; assistantId: string; round: number }, model: ModelDefinition, chunks: BatchChunk[]): Promise<void> {
    const startedAt = Date.now();
    const key = `document-embeddings:${document.id}:${document.round}:${chunks[0].batch}:${model.id}`;
    // Failover across the model's deployments only: a fallback model's vectors live in another space than the assistant's.
    const fallbacks: ModelDefinition[] = [];
    // A chunk longer than the model takes (a large chunk size on a model of 2,048 tokens) is embedded by its beginning.
    const maxInputTokens = model.embedding?.maxInputTokens ?? model.contextLength;
    const inputs = chunks.map((chunk) =>
      chunk.tokens <= maxInputTokens ? chunk.content : chunk.content.slice(0, Math.floor((chunk.content.length * maxInputTokens * 0.9) / chunk.tokens)),
    );
    const counted = chunks.reduce((sum, chunk) => sum + Math.min(chunk.tokens, maxInputTokens), 0);
    const ceiling = promptCeiling(this.providers.priceCeiling(model, fallbacks));
    const amount = Math.max(1, ceilMillicents(llmCost(ceiling, { inputTokens: counted, outputTokens: 0, cachedTokens: 0 })));
    // A row of its own, since the settlement is keyed by the batch; the leases' spare is recalled when they hold the money.
    const hold = await this.wallet.holdRecallingLeases(document.workspaceId, key, amount, this.config.holdTtlMs);
    if (!hold) {
      throw new ApiError('insufficient_balance', `The wallet cannot cover the embeddings of document ${document.id} (${amount} millicents): they wait for a top-up.`, {
        code: 'insufficient_balance',
      });
    }
    let served: ModelDefinition = model;
    let answeredBy: { model: string; provider: string; deployment: string } | null = null;
    let attempts = 0;
    const route: RouteObserver = {
      attempting: (target) => {
        attempts++;
        served = target.served;
      },
      answered: (target) => {
        served = target.served;
        answeredBy = { model: target.model.id, provider: target.served.provider, deployment: target.label };
      },
    };
    let vectors: Float32Array[];
    let reported: number | undefined;
    try {
      const result = await this.providers.embed(
        { model, fallbacks, input: inputs, budgetTokens: counted, route },
        new Cancellation(),
      );
      vectors = result.vectors;
      reported = result.promptTokens;
    } catch (error) {
      await this.wallet.release(hold);
      throw error;
    }
    // The provider's count as /v1/embeddings bills it, within what the inputs can have; ours when it gave none.
    const most = chunks.length * maxInputTokens;
    const tokens = reported !== undefined && Number.isSafeInteger(reported) && reported >= 0 ? Math.min(reported, most) : counted;
    const costMicros = llmCost(served, { inputTokens: tokens, outputTokens: 0, cachedTokens: 0 });
    const answered = answeredBy as { model: string; provider: string; deployment: string } | null;
    const cost = toMillicentsNumber(costMicros);
    const usageRow = this.usage.row({
      workspaceId: document.workspaceId,
      requestId: key,
      apiKeyId: null,
      apiKeyName: null,
      assistantId: document.assistantId,
      model: answered?.model ?? model.id,
      userId: null,
      subscriptionId: null,
      stream: false,
      source: 'document_embeddings',
      nerfing: [],
      inputTokens: tokens,
      outputTokens: 0,
      totalTokens: tokens,
      cachedTokens: 0,
      llmCostMillicents: cost,
      toolCostMillicents: 0,
      totalCostMillicents: cost,
      chargedMillicents: 0,
      toolsUsed: [],
      iterations: 1,
      provider: answered?.provider ?? null,
      deployment: answered?.deployment ?? null,
      attempts,
      latencyMs: Date.now() - startedAt,
      status: 'success',
      errorCode: null,
    });
    usageRow.created_at = new Date().toISOString();
    const [settlement] = await this.wallet.settleMany(
      [
        {
          // Keyed by the batch rather than the hold: a second settlement of the batch finds the first and changes nothing.
          hold: { id: key, workspaceId: document.workspaceId, amountMillicents: hold.amountMillicents },
          heldIn: { rowId: hold.id, lease: false },
          charge: { workspaceId: document.workspaceId, costMicros, description: `${answered?.model ?? model.id}: embeddings of ${chunks.length} chunks, ${tokens} input tokens` },
          retry: true,
          usageRow,
        },
      ],
      {
        alsoInTransaction: async (manager, [outcome]) => {
          if (outcome.applied) await storeVectors(manager, document.assistantId, model.id, chunks, vectors);
        },
      },
    );
    if (settlement.applied) return;
    // Another reader settled this batch first, and stored its vectors: this hold is given back.
    await this.wallet.release(hold);
    // Unless the chunks were replaced within the round (new chunks must start a new round: see
    // DocumentsService.reindex): then stop, rather than ask the upstream for them again and again.
    const [missing] = await this.documents.query<Array<{ n: number }>>(
      `SELECT count(*)::int AS n FROM document_chunks WHERE id = ANY($1::bigint[]) AND embedding_model IS DISTINCT FROM $2`,
      [chunks.map((chunk) => chunk.id), model.id],
    );
    if (missing.n > 0) throw new Error(`Batch ${key} was charged before, but ${missing.n} of its chunks have no vector: they wait for a new round`);
  }
}

interface BatchChunk {
  id: string;
  position: number;
  content: string;
  tokens: number;
  batch: number;
}

/** The batch's vectors, and a new generation of the assistant's vectors (every process's cache reloads them). */
async function storeVectors(manager: EntityManager, assistantId: string, model: string, chunks: BatchChunk[], vectors: Float32Array[]): Promise<void> {
  await manager.query(
    `UPDATE document_chunks c SET embedding = v.embedding, embedding_model = $1
     FROM unnest($2::bigint[], $3::bytea[]) AS v(id, embedding) WHERE c.id = v.id`,
    [model, chunks.map((chunk) => chunk.id), vectors.map(encodeVector)],
  );
  await manager.query(`UPDATE assistants SET embedding_generation = embedding_generation + 1 WHERE id = $1`, [assistantId]);
}
