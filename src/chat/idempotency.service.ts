import { Injectable, Logger } from '@nestjs/common';
import { Interval } from '@nestjs/schedule';
import { InjectDataSource } from '@nestjs/typeorm';
import { createHash } from 'node:crypto';
import { DataSource } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { queryRows } from '../common/database/query-rows';

const KEY_FORMAT = /^[\x21-\x7e]{1,255}$/;

/**
 * `Idempotency-Key` on a non-streaming request: a retry with the same key within 24 hours
 * gets the stored answer instead of a second call (and a second charge). The key is claimed
 * with one conditional insert, so two concurrent retries cannot both run.
 */
@Injectable()
export class IdempotencyService {
  private readonly logger = new Logger('Idempotency');

  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run<T>(workspaceId: string, key: string, body: unknown, execute: () => Promise<T>): Promise<{ response: T; replayed: boolean }> {
    if (!KEY_FORMAT.test(key)) {
      throw ApiError.badRequest('The Idempotency-Key header must be 1 to 255 visible ASCII characters.', 'Idempotency-Key');
    }
    const hash = createHash('sha256').update(JSON.stringify(body)).digest('hex');
    // Claims the key when it is new, or when its last use is more than a day old.
    const claimed = await queryRows<{ claimed: boolean }>(
      this.dataSource.manager,
      `INSERT INTO idempotent_requests (workspace_id, idempotency_key, request_hash)
       VALUES ($1, $2, $3)
       ON CONFLICT (workspace_id, idempotency_key) DO UPDATE
         SET request_hash = EXCLUDED.request_hash, status_code = NULL, response = NULL, created_at = now()
         WHERE idempotent_requests.created_at < now() - interval '24 hours'
       RETURNING true AS claimed`,
      [workspaceId, key, hash],
    );
    if (claimed.length === 0) return { response: await this.replay<T>(workspaceId, key, hash), replayed: true };

    let response: T;
    try {
      response = await execute();
    } catch (error) {
      // A failed request charged nothing: the key is freed so that the retry really runs.
      await this.dataSource
        .query(`DELETE FROM idempotent_requests WHERE workspace_id = $1 AND idempotency_key = $2`, [workspaceId, key])
        .catch(() => undefined);
      throw error;
    }
    // The request ran and was charged: the key must never be freed now. If storing the
    // answer fails, retries see the request as in progress (409) rather than run it again.
    await this.dataSource
      .query(`UPDATE idempotent_requests SET status_code = 200, response = $3 WHERE workspace_id = $1 AND idempotency_key = $2`, [
        workspaceId,
        key,
        JSON.stringify(response),
      ])
      .catch((error) => this.logger.error(`Storing the answer for Idempotency-Key ${key} failed: ${String(error)}`));
    return { response, replayed: false };
  }

  private async replay<T>(workspaceId: string, key: string, hash: string): Promise<T> {
    const [row] = await this.dataSource.query(
      `SELECT request_hash, response FROM idempotent_requests WHERE workspace_id = $1 AND idempotency_key = $2`,
      [workspaceId, key],
    );
    if (!row) throw ApiError.conflict('The request with this Idempotency-Key just failed; retry it.', 'idempotent_request_failed');
    if (row.request_hash !== hash) {
      throw ApiError.conflict(
        'This Idempotency-Key was already used with a different request body. Use a new key for a new request.',
        'idempotency_key_reused',
      );
    }
    if (row.response === null) {
      throw ApiError.conflict('A request with this Idempotency-Key is still in progress.', 'idempotent_request_in_progress');
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
