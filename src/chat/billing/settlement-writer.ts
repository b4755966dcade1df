import type { EntityManager } from 'typeorm';
import { inSavepoint } from '../../common/database/savepoint';
import type { AppendTurnParams, ConversationsService } from '../../conversations/conversations.service';
import type { NewUsageRecord, UsageService } from '../../usage/usage.service';
import type { Settlement, SettlementOrder, WalletService } from '../../wallet/wallet.service';

/** At most this many settlements share one transaction. */
const MAX_BATCH = 256;

/** One request's settlement, with what must commit beside its charge. */
export interface SettlementJob {
  requestId: string;
  order: SettlementOrder;
  /** Its usage record, once the charge is known. */
  record: (settlement: Settlement) => NewUsageRecord;
  /** With a conversation, the successful turn to store. */
  turn: AppendTurnParams | null;
}

export interface SettlementWriterPorts {
  wallet: Pick<WalletService, 'settleMany'>;
  usage: Pick<UsageService, 'recordMany'>;
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
 * Group commit of settlements. Requests that end while a transaction is being written queue
 * up, and the next transaction settles all of them: each wallet row is written once per
 * batch, the ledger rows and usage records in one statement each. A request's promise
 * resolves once its batch has committed, so a client is told its cost only when the charge
 * is durable. Nothing waits for a timer: a lone request is written at once, and under load
 * the batches grow by themselves with the time a commit takes.
 *
 * A batch that fails is written again one settlement at a time, with what is written beside
 * each charge in savepoints: a usage record or conversation turn the database refuses is
 * counted and logged, and the charge still commits; one bad settlement fails alone.
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

  /**
   * Writes a batch. The first try has no savepoints (three round trips fewer); if the
   * transaction fails, nothing of it committed, and each settlement is written again on its
   * own, carefully: its ledger rows looked up first (a commit may have succeeded unseen) and
   * what is written beside the charge in savepoints, so that only what the database refuses
   * is lost, and one bad settlement fails alone.
   */
  private async write(batch: Queued[], careful = false): Promise<void> {
    try {
      let records: NewUsageRecord[] = [];
      const settlements = await this.ports.wallet.settleMany(
        batch.map(({ job }) => (careful ? { ...job.order, retry: true } : job.order)),
        async (manager, outcomes) => {
          records = await this.writeBeside(manager, batch, outcomes, careful);
        },
      );
      this.ports.committed?.(records);
      batch.forEach(({ resolve }, index) => resolve(settlements[index]));
    } catch (error) {
      if (careful) return batch[0].reject(error);
      for (const queued of batch) await this.write([queued], true);
    }
  }

  /** Writes the usage records and turns of the settlements applied; returns those records. */
  private async writeBeside(manager: EntityManager, batch: Queued[], settlements: Settlement[], careful: boolean): Promise<NewUsageRecord[]> {
    const applied = batch.map(({ job }, index) => ({ job, settlement: settlements[index] })).filter(({ settlement }) => settlement.applied);
    const records = applied.map(({ job, settlement }) => job.record(settlement));
    if (!careful) {
      if (records.length > 0) await this.ports.usage.recordMany(manager, records);
      for (const { job } of applied) if (job.turn) await this.ports.conversations.appendTurn(manager, job.turn);
      return records;
    }
    // Careful: one settlement, whose record and turn may be refused without undoing its charge.
    for (const record of records) {
      const refused = await inSavepoint(manager, () => this.ports.usage.recordMany(manager, [record]));
      if (refused) this.ports.incident('usage_record_not_stored', record.requestId, refused);
    }
    for (const { job } of applied) {
      if (!job.turn) continue;
      const turn = job.turn;
      const failed = await inSavepoint(manager, () => this.ports.conversations.appendTurn(manager, turn));
      if (failed) this.ports.incident('conversation_turn_not_stored', job.requestId, failed);
    }
    return records;
  }
}
