import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { queryRows } from '../common/database/query-rows';

/** A new use of a key: whose, by which request, and the hash of what that request was. */
export interface NewClaim {
  workspaceId: string;
  apiKeyId: string | null;
  requestId: string;
  key: string;
  requestHash: string;
}

/** A key's row as a retry reads it. */
export interface StoredClaim {
  request_hash: string;
  status_code: number | null;
  /** The stored answer; null while it runs, or when the answer could not be stored. */
  response: unknown;
  api_key_id: string | null;
}

/**
 * The statements of `idempotent_requests`. Whether a key may be claimed again is decided by
 * the one conditional insert (so two concurrent retries cannot both run); what a retry is
 * told is IdempotencyService's.
 */
@Injectable()
export class IdempotencyStore {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /**
   * Claims the key when it is new, when its last use is more than a day old, or when the
   * request that claimed it died mid-flight. A request in flight says so by pushing its
   * claim's alive_at out (keepAlive); a claim not kept alive for `staleAfterMs` belongs to a
   * process that stopped. It is still told apart from a request that was charged (whose
   * retry must not run again) by the usage record every settlement writes.
   */
  async claim(claim: NewClaim, staleAfterMs: number): Promise<boolean> {
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
      [claim.workspaceId, claim.key, claim.requestHash, claim.requestId, staleAfterMs, claim.apiKeyId],
    );
    return claimed.length > 0;
  }

  async keepAlive(workspaceId: string, key: string): Promise<void> {
    await this.dataSource.query(`UPDATE idempotent_requests SET alive_at = now() WHERE workspace_id = $1 AND idempotency_key = $2`, [
      workspaceId,
      key,
    ]);
  }

  async free(workspaceId: string, key: string): Promise<void> {
    await this.dataSource.query(`DELETE FROM idempotent_requests WHERE workspace_id = $1 AND idempotency_key = $2`, [workspaceId, key]);
  }

  /** Marks the claim finished with its answer (JSON text), or with none when it could not be stored. */
  async finish(workspaceId: string, key: string, statusCode: number, answer: string | null): Promise<void> {
    await this.dataSource.query(
      `UPDATE idempotent_requests SET status_code = $3, response = $4 WHERE workspace_id = $1 AND idempotency_key = $2`,
      [workspaceId, key, statusCode, answer],
    );
  }

  async find(workspaceId: string, key: string): Promise<StoredClaim | null> {
    const rows: StoredClaim[] = await this.dataSource.query(
      `SELECT request_hash, status_code, response, api_key_id FROM idempotent_requests WHERE workspace_id = $1 AND idempotency_key = $2`,
      [workspaceId, key],
    );
    return rows[0] ?? null;
  }

  async deleteExpired(): Promise<void> {
    await this.dataSource.query(`DELETE FROM idempotent_requests WHERE created_at < now() - interval '24 hours'`);
  }
}
