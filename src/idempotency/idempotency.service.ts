import { Injectable, Logger } from '@nestjs/common';
import { Interval } from '@nestjs/schedule';
import { InjectDataSource } from '@nestjs/typeorm';
import { createHash } from 'node:crypto';
import { DataSource } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { queryRows } from '../common/database/query-rows';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';

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
    @InjectDataSource() private readonly dataSource: DataSource,
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
    // Claims the key when it is new, when its last use is more than a day old, or when the
    // request that claimed it died mid-flight. A request in flight says so by pushing its
    // claim's alive_at out (below); a claim not kept alive for as long as a hold lives belongs
    // to a process that stopped. It is still told apart from a request that was charged
    // (whose retry must not run again) by the usage record every settlement writes.
    const claimed = await queryRows<{ claimed: boolean }>(
      this.dataSource.manager,
      `INSERT INTO idempotent_requests AS claim (workspace_id, idempotency_key, request_hash, request_id, api_key_id)
       VALUES ($1, $2, $3, $4, $6)
       ON CONFLICT (workspace_id, idempotency_key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, request_id = EXCLUDED.request_id, api_key_id = EXCLUDED.api_key_id,
             status_code = NULL, response = NULL, created_at = now(), alive_at = now()
         WHERE claim.created_at < now() - interval '24 hours'
            OR (claim.status_code IS NULL
                AND claim.request_id IS NOT NULL
                AND claim.alive_at < now() - make_interval(secs => $5::double precision / 1000)
                AND NOT EXISTS (SELECT 1 FROM usage_records u
                                 WHERE u.workspace_id = $1 AND u.request_id = claim.request_id AND u.created_at >= claim.created_at))
       RETURNING true AS claimed`,
      [workspaceId, key, hash, requestId, this.config.holdTtlMs, apiKeyId],
    );
    if (claimed.length === 0) return { response: await this.replay<T>(workspaceId, apiKeyId, key, hash), replayed: true };

    let response: T;
    const heartbeat = setInterval(() => {
      this.dataSource
        .query(`UPDATE idempotent_requests SET alive_at = now() WHERE workspace_id = $1 AND idempotency_key = $2`, [workspaceId, key])
        .catch((error) => this.logger.warn(`Could not keep Idempotency-Key ${key} alive: ${String(error)}`));
    }, this.config.holdTtlMs / 3).unref();
    try {
      response = await execute();
    } catch (error) {
      // A failed request charged nothing: the key is freed so that the retry really runs.
      await this.dataSource
        .query(`DELETE FROM idempotent_requests WHERE workspace_id = $1 AND idempotency_key = $2`, [workspaceId, key])
        .catch(() => undefined);
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
    const store = (answer: string | null) =>
      this.dataSource.query(
        `UPDATE idempotent_requests SET status_code = $3, response = $4 WHERE workspace_id = $1 AND idempotency_key = $2`,
        [workspaceId, key, statusCode, answer],
      );
    try {
      await store(JSON.stringify(response));
    } catch (error) {
      this.logger.error(`Storing the answer for Idempotency-Key ${key} failed: ${String(error)}`);
      await store(null).catch((markError) =>
        this.logger.error(`Marking Idempotency-Key ${key} as finished failed too: ${String(markError)}`),
      );
    }
  }

  private async replay<T>(workspaceId: string, apiKeyId: string | null, key: string, hash: string): Promise<T> {
    const [row] = await this.dataSource.query(
      `SELECT request_hash, status_code, response, api_key_id FROM idempotent_requests WHERE workspace_id = $1 AND idempotency_key = $2`,
      [workspaceId, key],
    );
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
      await this.dataSource.query(`DELETE FROM idempotent_requests WHERE created_at < now() - interval '24 hours'`);
    } catch (error) {
      this.logger.error(`Deleting expired idempotency keys failed: ${String(error)}`);
    }
  }
}
