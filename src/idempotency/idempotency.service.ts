import { Injectable, Logger } from '@nestjs/common';
import { Interval } from '@nestjs/schedule';
import { createHash } from 'node:crypto';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { IdempotencyStore } from './idempotency-store';

const KEY_FORMAT = /^[\x21-\x7e]{1,255}$/;

/** One use of an `Idempotency-Key`: whose, by which request, and what that request was. */
export interface IdempotencyClaim {
  workspaceId: string;
  /** The API key that sends it: a stored answer is replayed only to that key. */
  apiKeyId: string | null;
  requestId: string;
  key: string;
  /** The request body; a retry must send the same. */
  body: unknown;
  /** Set for routes whose keys are kept apart from the other routes' (see IdempotentOptions). */
  scope?: string;
  /** The status the route answers with, stored with its answer. */
  statusCode: number;
}

/**
 * `Idempotency-Key` on a request: a retry with the same key within 24 hours gets the stored
 * answer instead of a second run (and, for a chat completion, a second charge). The key is
 * claimed with one conditional insert, so two concurrent retries cannot both run.
 */
@Injectable()
export class IdempotencyService {
  private readonly logger = new Logger('Idempotency');

  constructor(
    private readonly store: IdempotencyStore,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  async run<T>(claim: IdempotencyClaim, execute: () => Promise<T>): Promise<{ response: T; replayed: boolean }> {
    const { workspaceId, apiKeyId, requestId, key, body, scope, statusCode } = claim;
    if (!KEY_FORMAT.test(key)) {
      throw ApiError.badRequest('The Idempotency-Key header must be 1 to 255 visible ASCII characters.', 'Idempotency-Key');
    }
    const hash = createHash('sha256')
      .update(scope === undefined ? JSON.stringify(body) : `${scope}\n${JSON.stringify(body)}`)
      .digest('hex');
    // A claim not kept alive for as long as a hold lives belongs to a process that stopped.
    const claimed = await this.store.claim({ workspaceId, apiKeyId, requestId, key, requestHash: hash }, this.config.holdTtlMs);
    if (!claimed) return { response: await this.replay<T>(workspaceId, apiKeyId, key, hash), replayed: true };

    let response: T;
    const heartbeat = setInterval(() => {
      this.store
        .keepAlive(workspaceId, key)
        .catch((error) => this.logger.warn(`Could not keep Idempotency-Key ${key} alive: ${String(error)}`));
    }, this.config.holdTtlMs / 3).unref();
    try {
      response = await execute();
    } catch (error) {
      // A failed request charged nothing: the key is freed so that the retry really runs.
      await this.store.free(workspaceId, key).catch(() => undefined);
      throw error;
    } finally {
      clearInterval(heartbeat);
    }
    await this.storeAnswer(workspaceId, key, statusCode, response);
    return { response, replayed: false };
  }

  /**
   * The request ran and was charged: the key must never be freed now. When its answer
   * cannot be stored, the claim is still marked finished (status without a response), so
   * retries are told so at once instead of waiting for a request that will never end.
   */
  private async storeAnswer(workspaceId: string, key: string, statusCode: number, response: unknown): Promise<void> {
    const finish = (answer: string | null) => this.store.finish(workspaceId, key, statusCode, answer);
    try {
      await finish(JSON.stringify(response));
    } catch (error) {
      this.logger.error(`Storing the answer for Idempotency-Key ${key} failed: ${String(error)}`);
      await finish(null).catch((markError) =>
        this.logger.error(`Marking Idempotency-Key ${key} as finished failed too: ${String(markError)}`),
      );
    }
  }

  private async replay<T>(workspaceId: string, apiKeyId: string | null, key: string, hash: string): Promise<T> {
    const row = await this.store.find(workspaceId, key);
    if (!row) throw ApiError.conflict('The request with this Idempotency-Key just failed; retry it.', 'idempotent_request_failed');
    // Another key's answer is never given: it may have run what this key may not (a claim
    // written before the owner was recorded has none, and replays as it did then).
    if (row.api_key_id !== null && row.api_key_id !== apiKeyId) {
      throw ApiError.conflict(
        'This Idempotency-Key was already used by another API key of this workspace. Use a new key for a new request.',
        'idempotency_key_reused',
      );
    }
    // A request with another body, or the same body sent to another scoped route.
    if (row.request_hash !== hash) {
      throw ApiError.conflict(
        'This Idempotency-Key was already used with a different request body. Use a new key for a new request.',
        'idempotency_key_reused',
      );
    }
    if (row.status_code === null) {
      throw ApiError.conflict('A request with this Idempotency-Key is still in progress.', 'idempotent_request_in_progress');
    }
    if (row.response === null) {
      throw ApiError.conflict(
        'The request with this Idempotency-Key was completed and charged, but its answer could not be stored. ' +
          'Send a new Idempotency-Key to run it again.',
        'idempotent_response_unavailable',
      );
    }
    return row.response as T;
  }

  @Interval(60 * 60_000)
  async forgetExpired(): Promise<void> {
    try {
      await this.store.deleteExpired();
    } catch (error) {
      this.logger.error(`Deleting expired idempotency keys failed: ${String(error)}`);
    }
  }
}
