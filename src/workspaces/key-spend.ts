import { Injectable } from '@nestjs/common';
import { PendingSettlements } from '../common/settlements/pending-settlements';
import { ApiKeysStore } from './api-keys-store';

/** What an API key was charged, in whole millicents, and what its requests in flight hold against its limit. */
export interface KeySpend {
  /** In the current period of its spending limit (all time for a key whose limit never resets, or without a limit). */
  period: number;
  today: number;
  /** This week (from Monday, UTC). */
  week: number;
  month: number;
  allTime: number;
  /** Held by its requests in flight (counted against the limit until their charges commit). */
  held: number;
}

@Injectable()
export class KeySpendService {
  constructor(
    private readonly store: ApiKeysStore,
    /** Absent where no chat request is served (the CLI). */
    private readonly pending: PendingSettlements,
  ) {}

  /** Each key's spend, by id (keys of the workspace, whose answered requests' charges are committed first). */
  async of(workspaceId: string, keyIds: string[]): Promise<Map<string, KeySpend>> {
    if (keyIds.length === 0) return new Map();
    await this.pending.written(workspaceId);
    const rows = await this.store.spendOf(keyIds);
    return new Map(
      rows.map((row) => [
        row.id,
        {
          period: Number(row.period),
          today: Number(row.today),
          week: Number(row.week),
          month: Number(row.month),
          allTime: Number(row.all_time),
          held: Number(row.held),
        },
      ]),
    );
  }
}
