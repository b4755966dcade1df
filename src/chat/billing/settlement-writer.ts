import type { EntityManager } from 'typeorm';
import { inSavepoint } from '../../common/database/savepoint';
import { isDatabaseUnavailable } from '../../common/errors/database-unavailable';
import type { AppendTurnParams, ConversationsService } from '../../conversations/conversations.service';
import type { NewUsageRecord, UsageService } from '../../usage/usage.service';
import type { Settlement, SettlementOrder, WalletService } from '../../wallet/wallet.service';

/** At most this many settlements share one transaction. */
const MAX_BATCH = 256;

/** One request's settlement, with what must commit beside its charge. */
export interface SettlementJob {
  requestId: string;
  order: SettlementOrder;
  /** Its usage record; the settlement fills in what was charged. */
  record: Omit<NewUsageRecord, 'chargedMillicents'>;
  /** With a conversation, the successful turn to store. */
  turn: AppendTurnParams | null;
}

export interface SettlementWriterPorts {
  wallet: Pick<WalletService, 'settleMany'>;
  usage: Pick<UsageService, 'row'>;
  conversations: Pick<ConversationsService, 'appendTurn'>;
  /** A usage record or turn that could not be stored beside its charge (which still commits). */
  incident: (kind: 'usage_record_not_stored' | 'conversation_turn_not_stored', requestId: string, error: unknown) => void;
  /** Told the usage records of each batch that committed (metrics of tokens, charges and outcomes). */
  committed?: (records: NewUsageRecord[]) => void;
}

interface Queued {
  job: SettlementJob;
  resolve: (settlement: Settlement) => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit of settlements. Requests that end while a batch is being written queue up,
 * and the next batch settles all of them: the charges, ledger rows and usage records in one
 * autocommitted statement (WalletService.settleMany), or, when conversation turns are to be
 * stored, in one transaction with them. A request's promise resolves once its batch has
 * committed, so a client is told its cost only when the charge is durable. Nothing waits
 * for a timer: a lone request is written at once, and under load the batches grow by
 * themselves with the time a commit takes.
 *
 * A batch that fails is written again one settlement at a time, carefully: its ledger rows
 * and usage record looked up first (a commit may have succeeded unseen), its turn in a
 * savepoint, and its usage record optional: a turn or record that the database refuses as
 * data is counted and logged, and the charge still commits. Anything else (a deadlock, a
 * timeout) fails that settlement alone, for its request to retry. A batch that failed
 * because the database is gone fails whole: one at a time would only fail slower.
 */
export class SettlementWriter {
  private readonly queue: Queued[] = [];
  private writing: Promise<void> | null = null;

  constructor(private readonly ports: SettlementWriterPorts) {}

  submit(job: SettlementJob): Promise<Settlement> {
    return new Promise<Settlement>((resolve, reject) => {
      this.queue.push({ job, resolve, reject });
      this.kick();
    });
  }

  /** Resolves once every submitted settlement has been written (or has failed). */
  async idle(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private kick(): void {
    if (this.writing) return;
    this.writing = this.drain().finally(() => {
      this.writing = null;
      if (this.queue.length > 0) this.kick();
    });
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) await this.write(this.queue.splice(0, MAX_BATCH));
  }

  /** Writes a batch; if it fails, each of its settlements again on its own, carefully. */
  private async write(batch: Queued[]): Promise<void> {
    try {
      this.committed(batch, await this.settle(batch, false));
    } catch (error) {
      if (isDatabaseUnavailable(error)) return batch.forEach(({ reject }) => reject(error));
      for (const queued of batch) await this.writeCarefully(queued);
    }
  }

  private async writeCarefully(queued: Queued): Promise<void> {
    try {
      const [settlement] = await this.settle([queued], true);
      if (settlement.usageRecordRefused) this.ports.incident('usage_record_not_stored', queued.job.requestId, settlement.usageRecordRefused);
      this.committed([queued], [settlement]);
    } catch (error) {
      queued.reject(error);
    }
  }

  private settle(batch: Queued[], careful: boolean): Promise<Settlement[]> {
    const orders = batch.map(
      ({ job }): SettlementOrder => ({ ...job.order, retry: careful || job.order.retry, usageRow: this.ports.usage.row(job.record) }),
    );
    return this.ports.wallet.settleMany(orders, {
      recordsOptional: careful,
      alsoInTransaction: batch.some(({ job }) => job.turn)
        ? (manager, settlements) => this.appendTurns(manager, batch, settlements, careful)
        : undefined,
    });
  }

  /** The conversation turns of the settlements applied; carefully, each in a savepoint. */
  private async appendTurns(manager: EntityManager, batch: Queued[], settlements: Settlement[], careful: boolean): Promise<void> {
    for (const [index, { job }] of batch.entries()) {
      const turn = job.turn;
      if (!turn || !settlements[index].applied) continue;
      if (!careful) {
        await this.ports.conversations.appendTurn(manager, turn);
        continue;
      }
      const failed = await inSavepoint(manager, () => this.ports.conversations.appendTurn(manager, turn));
      if (failed) this.ports.incident('conversation_turn_not_stored', job.requestId, failed);
    }
  }

  /** Tells each request its settlement, and the metrics the records of those applied. */
  private committed(batch: Queued[], settlements: Settlement[]): void {
    const records = batch.flatMap(({ job }, index) => {
      const settlement = settlements[index];
      return settlement.applied && !settlement.usageRecordRefused ? [{ ...job.record, chargedMillicents: settlement.keptMillicents }] : [];
    });
    this.ports.committed?.(records);
    batch.forEach(({ resolve }, index) => resolve(settlements[index]));
  }
}
