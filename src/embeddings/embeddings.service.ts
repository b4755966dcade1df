import { Injectable } from '@nestjs/common';
import { Billing } from '../billing/billing';
import type { BillingSession } from '../billing/billing-session';
import { isTokenCount } from '../billing/spend';
import type { UsageSubject } from '../billing/usage-record';
import { keyBudgetOf } from '../chat/chat.service';
import type { Cancellation } from '../common/cancellation';
import { ApiError } from '../common/errors/api-error';
import type { Principal } from '../common/http/request-context';
import { ServerDrain, serverShuttingDown } from '../common/http/server-drain';
import type { ModelDefinition } from '../models/model-catalog';
import { ModelsService } from '../models/models.service';
import { toBase64, toFloats } from '../providers/embedding-vectors';
import { ProvidersService } from '../providers/providers.service';
import { countTextTokensAsync } from '../providers/tokens';
import { isAbort } from '../providers/upstream-errors';
import { assertKeyMayRun } from '../workspaces/key-limits';
import { EmbeddingRequest, MAX_EMBEDDING_REQUEST_TOKENS, parseEmbeddingRequest } from './embedding-request';

/** A token is at most this many characters (o200k's longest): a longer text is over a limit without counting it. */
const LONGEST_TOKEN_CHARS = 128;

/** A token array's ids are of the model's tokenizer: a 400 naming `input` for the first that is not. */
function checkTokenIds(inputs: number[][], vocabularySize: number, model: string): void {
  for (const [index, tokens] of inputs.entries()) {
    const bad = tokens.findIndex((token) => token >= vocabularySize);
    if (bad >= 0) {
      const at = inputs.length === 1 ? `input[${bad}]` : `input[${index}][${bad}]`;
      throw ApiError.badRequest(`${at} is ${tokens[bad]}, not a token id of ${model}'s tokenizer (0 to ${vocabularySize - 1}).`, 'input', 'invalid_input');
    }
  }
}

/** Who calls: the key's principal, the request's id (its hold and usage record), and whether it carries an Idempotency-Key. */
export interface EmbeddingsCaller {
  principal: Principal;
  requestId: string;
  idempotent: boolean;
}

/** OpenAI's answer, with our `x_service`. */
export interface EmbeddingsResponse {
  object: 'list';
  data: Array<{ object: 'embedding'; index: number; embedding: number[] | string }>;
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
  x_service: { cost_millicents: number; provider: string | null; deployment: string | null; attempts: number };
}

/**
 * `POST /v1/embeddings` on the money path of chat requests, without a tool loop: the request
 * is checked (key limits, the model's kind and bounds), its inputs counted with our tokenizer
 * and that prompt held at the model's dearest input price (402 when the wallet cannot cover
 * it), the call routed over the model's deployments like a completion, and settled once at
 * the provider's `prompt_tokens` (ours when it reports none); a failure is refunded. Every
 * request gets one usage record, source `embeddings`.
 */
@Injectable()
export class EmbeddingsService {
  constructor(
    private readonly models: ModelsService,
    private readonly providers: ProvidersService,
    private readonly billing: Billing,
    private readonly drain: ServerDrain,
  ) {}

  async create(caller: EmbeddingsCaller, body: unknown, clientGone: Cancellation): Promise<EmbeddingsResponse> {
    const link = this.drain.untilDeadline(clientGone);
    try {
      const { request, model, fallbacks, promptTokens, exact, billing } = await this.prepare(caller, body, clientGone);
      try {
        const result = await this.providers.embed(
          { model, fallbacks, input: request.input, dimensions: request.dimensions, budgetTokens: promptTokens, route: billing.route },
          link.run,
        );
        // The provider's count, within what the inputs can have been; ours when it gave none (the hold may be a bound).
        const reported = result.promptTokens;
        const maxInputTokens = model.embedding?.maxInputTokens ?? model.contextLength;
        const most = request.input.length * maxInputTokens;
        billing.meterInput(isTokenCount(reported) ? Math.min(reported, most) : exact ? promptTokens : await this.countExactly(request, maxInputTokens));
        await billing.settle(undefined);
        return this.answer(request, model, billing, result.vectors);
      } catch (error) {
        // Stopped by the drain deadline rather than by the client: answered 503, not charged.
        const cutByStop = isAbort(error) && link.run.aborted && this.drain.streamsCut.aborted;
        throw await billing.fail(cutByStop ? serverShuttingDown() : error);
      }
    } finally {
      link.release();
    }
  }

  /** A request the rate limit refused before it got here (see EmbeddingsRefusalFilter). Never throws. */
  recordRefused(caller: Omit<EmbeddingsCaller, 'idempotent'>, body: unknown, error: unknown): Promise<void> {
    const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
    const text = (value: unknown, max: number) => (typeof value === 'string' ? value.slice(0, max) : undefined);
    return this.billing.recordRefused(this.subjectOf(caller, text(fields.model, 200) || 'unknown', text(fields.user, 256)), 0, error);
  }

  isRecorded(error: unknown): boolean {
    return this.billing.isRecorded(error);
  }

  /** Checks the request, and holds its inputs' tokens at the model's dearest input price; a refusal is recorded, never charged. */
  private async prepare(caller: EmbeddingsCaller, body: unknown, clientGone: Cancellation) {
    const startedAt = Date.now();
    let request: EmbeddingRequest | undefined;
    let model: ModelDefinition | undefined;
    try {
      request = parseEmbeddingRequest(body);
      model = this.models.embeddingModel(request.model);
      const { keyLimits } = caller.principal;
      if (keyLimits) assertKeyMayRun(keyLimits, { models: [model.id], assistant: null });
      const shape = model.embedding!;
      if (request.dimensions !== undefined && !shape.adjustableDimensions) {
        throw ApiError.badRequest(`${model.id} does not take dimensions: its vectors have ${shape.dimensions}.`, 'dimensions', 'unsupported_parameter');
      }
      if (request.dimensions !== undefined && request.dimensions > shape.dimensions) {
        throw ApiError.badRequest(`dimensions must be from 1 to ${shape.dimensions} for ${model.id}.`, 'dimensions');
      }
      if (request.tokens && model.provider === 'google' && !this.providers.isSimulated(model)) {
        throw ApiError.badRequest(`${model.id} takes texts: token arrays are OpenAI's tokenizer's.`, 'input', 'invalid_input');
      }
      if (request.tokens && shape.vocabularySize !== undefined) checkTokenIds(request.input as number[][], shape.vocabularySize, model.id);
      const { tokens: promptTokens, exact } = await this.countInputs(request, shape.maxInputTokens);
      // The catalog's fallbacks that the key may not run are left out, never refused.
      const fallbacks = (model.fallbacks ?? [])
        .map((id) => this.models.find(id))
        .filter((f): f is ModelDefinition => f !== undefined && (!keyLimits?.allowedModels || keyLimits.allowedModels.includes(f.id)));
      const billing: BillingSession = await this.billing.open({
        subject: this.subjectOf(caller, model.id, request.user),
        startedAt,
        clientGone,
        // The hold covers the dearest deployment or fallback that may answer; the one that answers is charged.
        model: this.providers.priceCeiling(model, fallbacks),
        promptTokens,
        outputCap: 0,
        choices: 1,
        tools: [],
        toolPriceMicros: 0n,
        conversation: null,
        idempotent: caller.idempotent,
        keyBudget: keyBudgetOf(caller.principal),
      });
      return { request, model, fallbacks, promptTokens, exact, billing };
    } catch (error) {
      const modelId = model?.id || request?.model.slice(0, 200) || (typeof (body as { model?: unknown })?.model === 'string' ? String((body as { model: string }).model).slice(0, 200) : 'unknown');
      await this.billing.recordRefused(this.subjectOf(caller, modelId, request?.user), Date.now() - startedAt, error);
      throw error;
    }
  }

  /**
   * The inputs' tokens to hold, each within the model's input limit and all within OpenAI's
   * 300,000 a request (a 400 naming `input` otherwise), and whether that is our exact count.
   * A text of at most `maxInputTokens` UTF-8 bytes is held at its byte count, not tokenized: a
   * byte-level BPE token (OpenAI's, ours) is at least one byte, so no count of it can be more,
   * and the settlement charges the provider's count. Tokenizing every input cost more than
   * the rest of the request (bench/README.md, "Embeddings"). Longer texts are counted (they
   * may be over the limit), and every text is when the bounds add up past 300,000.
   */
  private async countInputs(request: EmbeddingRequest, maxInputTokens: number): Promise<{ tokens: number; exact: boolean }> {
    let bound = 0;
    let exact = true;
    for (const item of request.input) {
      const bytes = typeof item === 'string' ? Buffer.byteLength(item) : 0;
      if (typeof item === 'string' && bytes <= maxInputTokens) {
        bound += bytes;
        exact = false;
      } else bound += typeof item === 'string' ? Math.min(bytes, maxInputTokens) : item.length;
    }
    if (exact || bound > MAX_EMBEDDING_REQUEST_TOKENS) return { tokens: await this.countExactly(request, maxInputTokens), exact: true };
    // Only the long texts need counting now: each within the limit, or the request is refused.
    let tokens = 0;
    for (const [index, item] of request.input.entries()) {
      const bytes = typeof item === 'string' ? Buffer.byteLength(item) : Infinity;
      tokens += bytes <= maxInputTokens ? bytes : await this.countOne(request, index, maxInputTokens);
    }
    return { tokens, exact: false };
  }

  /** Our tokenizer's count of every input (a token array is its length), refused as `countInputs` says. */
  private async countExactly(request: EmbeddingRequest, maxInputTokens: number): Promise<number> {
    let total = 0;
    for (const index of request.input.keys()) {
      total += await this.countOne(request, index, maxInputTokens);
      if (total > MAX_EMBEDDING_REQUEST_TOKENS) {
        throw ApiError.badRequest(`The inputs have more than ${MAX_EMBEDDING_REQUEST_TOKENS} tokens, the most one request may have: split them.`, 'input', 'input_too_long');
      }
    }
    return total;
  }

  /** One input's tokens with our tokenizer, within the model's input limit. */
  private async countOne(request: EmbeddingRequest, index: number, maxInputTokens: number): Promise<number> {
    const item = request.input[index];
    const tokens = typeof item !== 'string' ? item.length : item.length > maxInputTokens * LONGEST_TOKEN_CHARS ? Infinity : await countTextTokensAsync(item);
    if (tokens > maxInputTokens) {
      const at = request.input.length === 1 && typeof item === 'string' ? 'input' : `input[${index}]`;
      throw ApiError.badRequest(
        `${at} has ${Number.isFinite(tokens) ? tokens : 'too many'} tokens; ${request.model} takes at most ${maxInputTokens} per input.`,
        'input',
        'input_too_long',
      );
    }
    return tokens;
  }

  private answer(request: EmbeddingRequest, model: ModelDefinition, billing: BillingSession, vectors: Float32Array[]): EmbeddingsResponse {
    const { spend } = billing;
    const promptTokens = spend.tokens.inputTokens;
    const encode = request.encodingFormat === 'base64' ? toBase64 : toFloats;
    const x = spend.xService();
    return {
      object: 'list',
      data: vectors.map((vector, index) => ({ object: 'embedding', index, embedding: encode(vector) })),
      // The name the request gave (an alias, say); a fallback that answered by its own, as chat completions do.
      model: spend.answeredBy && spend.answeredBy.model !== model.id ? spend.answeredBy.model : request.model,
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
      x_service: { cost_millicents: x.cost_millicents, provider: x.provider, deployment: x.deployment, attempts: x.attempts },
    };
  }

  private subjectOf(caller: Omit<EmbeddingsCaller, 'idempotent'>, model: string, user: string | undefined): UsageSubject {
    return {
      workspaceId: caller.principal.workspaceId,
      requestId: caller.requestId,
      apiKeyId: caller.principal.apiKeyId,
      apiKeyName: caller.principal.apiKeyName ?? null,
      assistantId: null,
      model,
      userId: user ?? null,
      subscriptionId: null,
      stream: false,
      source: 'embeddings',
    };
  }
}
