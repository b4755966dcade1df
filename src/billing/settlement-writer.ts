import type { EntityManager } from 'typeorm';
import { inSavepoint } from '../common/database/savepoint';
import { isDatabaseUnavailable } from '../common/errors/database-unavailable';
import type { AppendTurnParams, ConversationTurns } from '../conversations/conversation-turns';
import type { NewUsageRecord, UsageService } from '../usage/usage.service';
import type { Settlement, SettlementOrder, WalletService } from '../wallet/wallet.service';
import { existsSync } from 'node:fs';
import { JournalEntry, JournalSegment, SettlementJournal } from './settlement-journal';

/** At most this many settlements share one transaction. */
const MAX_BATCH = 256;
/** A journaled settlement that could not be written is tried again after this long, doubling up to the most. */
const RETRY_FIRST_MS = 500;
const RETRY_MOST_MS = 30_000;
/** At the stop, the last try to write the settlements kept in memory alone is given this long. */
const CLOSE_ATTEMPT_MS = 3_000;

/** One request's settlement, with what must commit beside its charge. */
export interface SettlementJob {
  requestId: string;
  order: SettlementOrder;
  /** Its usage record; the settlement fills in what was charged. */
  record: Omit<NewUsageRecord, 'chargedMillicents'>;
  /** With a conversation, the successful turn to store. */
  turn: AppendTurnParams | null;
  /** Answered only once committed, never from the journal (an Idempotency-Key request). */
  waitForCommit?: boolean;
  /**
   * Its answer (or part of it) already reached the client (a stream): if it cannot be
   * written now (the database went away), it is journaled then and written until it commits,
   * never failed back to its request.
   */
  delivered?: boolean;
  /**
   * Told once the writer lets go of a settlement it kept (committed, or handed over at the
   * stop): a hold of its own is kept alive until then (see BillingSession).
   */
  released?: () => void;
}

export interface SettlementWriterPorts {
  wallet: Pick<WalletService, 'settleMany'>;
  usage: Pick<UsageService, 'row'>;
  conversations: Pick<ConversationTurns, 'appendTurn'>;
  /** A usage record or turn that could not be stored beside its charge (which still commits). */
  incident: (kind: 'usage_record_not_stored' | 'conversation_turn_not_stored', requestId: string, error: unknown) => void;
  /** Told the usage records of each batch that committed (metrics of tokens, charges and outcomes). */
  committed?: (records: NewUsageRecord[]) => void;
  /** A settlement charged less than its cost: the wallet could not cover all of it. */
  writtenOff?: (job: SettlementJob, settlement: Settlement) => void;
  /**
   * Where settlements are kept from their answer to their commit (SETTLEMENT_DURABILITY=journal;
   * see journalTo). Without it, every request waits for its settlement's commit.
   */
  journal?: SettlementJournal;
  /** A settlement could not be appended to the journal (a full disk, say): it waits for its commit instead. */
  journalFailed?: (job: SettlementJob, error: unknown) => void;
  /** A journaled settlement failed to commit and waits to be tried again (logged; it is never dropped). */
  retrying?: (job: SettlementJob, error: unknown, delayMs: number) => void;
  /**
   * A settlement kept in memory alone that the stop could not write: appended to the journal
   * for the next start (`journaled`), or, where no journal could take it, lost unless an
   * operator writes it (logged with what is needed for that).
   */
  unwritten?: (job: SettlementJob, journaled: boolean, error: unknown) => void;
}

/**
 * Where a journaled settlement is kept, and how often it failed to commit. A delivered one
 * that could not be journaled (no journal, a full disk) is kept in memory alone.
 */
interface Journaled {
  kept?: { journal: SettlementJournal; segment: JournalSegment };
  attempts: number;
}

interface Queued {
  job: SettlementJob;
  /** Its usage_records row (UsageService.row), worked out once: journaled, then written. */
  usageRow: Record<string, unknown>;
  resolve: (settlement: Settlement | null) => void;
  reject: (error: unknown) => void;
  /** Journaled: its request was answered already, so it is written until it commits, however long that takes. */
  journaled?: Journaled;
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
 *
 * With a journal (SettlementJournal), a plain settlement of a request admitted from the
 * process's lease (no conversation turn, no refund, no Idempotency-Key) is appended to it
 * and its request answered at once, before the commit: a request then never waits for the
 * database after its answer. Such a settlement is never failed back to its request: it is
 * written again, with growing pauses, until it commits; a process that dies first leaves it
 * in the journal for the next one. Its money stays in the lease, which lives as long as the
 * process, until it commits, so nothing can spend it meanwhile. While the database is known
 * to be gone, nothing is journaled: requests fail with their settlement, as without a journal,
 * except a stream's whose content already reached its client (`delivered`): that one is
 * journaled once its write fails (kept in memory where there is no journal) and written when
 * the database is back, so that delivered content is never free.
 */
export class SettlementWriter {
  private readonly queue: Queued[] = [];
  private writing: Promise<void> | null = null;
  /** Journaled settlements not yet committed, by workspace: what resolves once each is (or waits for a retry). */
  private readonly journaled = new Map<string, Set<Promise<void>>>();
  /** Settlements waiting for their next try, by their timer. */
  private readonly retryTimers = new Map<NodeJS.Timeout, { queued: Queued; journaled: Journaled }>();
  /** Where the stop leaves what it could not write, for the next start's orphan replay (see lastResortIn). */
  private lastResort?: SettlementJournal;
  /** Stopped: a settlement kept from now on is handed over at once (see close). */
  private closed = false;
  /** Journal files of dead processes that this one claimed and has not finished writing. */
  private readonly unfinishedOrphans: string[] = [];
  /**
   * The last write found the database gone: until a write commits again, nothing is answered
   * from the journal (each request waits for its commit, and fails with it), so that a
   * process does not go on answering on credit through an outage.
   */
  private databaseGone = false;

  /**
   * When a settlement was submitted: its usage record's created_at, kept in the journal with
   * it, so that however late it commits (a retry, a replay after a crash) the record lands on
   * the UTC day (and in the partition) of its request. Replaced by tests that move the clock.
   */
  clock: () => number = Date.now;

  constructor(private readonly ports: SettlementWriterPorts) {}

  /** From now on, plain settlements are journaled (see the class). */
  journalTo(journal: SettlementJournal): void {
    this.ports.journal = journal;
  }

  /**
   * Where settlements kept in memory alone go when the process stops before writing them
   * (also with SETTLEMENT_DURABILITY=commit): the next start writes them (writeOrphans).
   */
  lastResortIn(journal: SettlementJournal): void {
    this.lastResort = journal;
  }

  /**
   * Queues a settlement, and resolves once it is durable: committed (with its settlement),
   * or, for a plain one with a journal, appended to the journal (with null).
   */
  submit(job: SettlementJob): Promise<Settlement | null> {
    const journal = this.ports.journal;
    const { order } = job;
    const usageRow = this.ports.usage.row(job.record);
    usageRow.created_at = new Date(this.clock()).toISOString();
    if (journal && !this.databaseGone && order.hold.lease && !job.turn && !job.waitForCommit && !order.refund && !order.retry) {
      try {
        const segment = journal.append(journalEntry(job, usageRow));
        this.queueJournaled(job, usageRow, { kept: { journal, segment }, attempts: 0 });
        return Promise.resolve(null);
      } catch (error) {
        quietly(() => this.ports.journalFailed?.(job, error));
      }
    }
    return new Promise<Settlement | null>((resolve, reject) => {
      this.queue.push({ job, usageRow, resolve, reject });
      this.kick();
    });
  }

  /**
   * Resolves once the workspace's journaled settlements submitted so far have committed (or,
   * failing, wait for their next try): what a read of its balance and usage waits for, so
   * that a client sees the charge of every answer it was given.
   */
  async flushed(workspaceId: string): Promise<void> {
    await Promise.all([...(this.journaled.get(workspaceId) ?? [])]);
  }

  /** Resolves once every submitted settlement has been written (or has failed, or waits for a retry). */
  async idle(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /**
   * Before the process exits: waits for what is being written, stops the retries, and
   * closes the journal (what did not commit stays in it, for the next process). What was
   * kept in memory alone (no journal took it) is tried once more, for CLOSE_ATTEMPT_MS at
   * most, and what still fails is handed over (see handOver), never dropped unsaid.
   */
  async close(): Promise<void> {
    await this.idle();
    this.closed = true;
    const kept: Queued[] = [];
    for (const [timer, { queued, journaled }] of this.retryTimers) {
      clearTimeout(timer);
      if (!journaled.kept) kept.push(queued);
    }
    this.retryTimers.clear();
    // Settlements that still come (a stream cut at the drain's deadline) wait for their commit.
    this.lastResort ??= this.ports.journal;
    this.ports.journal?.close();
    this.ports.journal = undefined;
    if (kept.length > 0) await this.lastAttempt(kept);
  }

  /**
   * Writes again the settlements of processes that died with journaled settlements not yet
   * committed (the journal's orphans, and files this process claimed before and could not
   * finish), found beside `journal`. Each file is deleted once all of its settlements
   * committed; a failure leaves it for the next call. Returns how many settlements were written.
   */
  async writeOrphans(journal: SettlementJournal): Promise<number> {
    this.unfinishedOrphans.push(...journal.claimOrphans());
    let written = 0;
    let failure: unknown;
    for (const file of [...this.unfinishedOrphans]) {
      try {
        const entries = existsSync(file) ? SettlementJournal.read(file) : [];
        for (let start = 0; start < entries.length; start += MAX_BATCH) {
          written += await this.settleOrphans(entries.slice(start, start + MAX_BATCH).map(orphanOrder));
        }
        SettlementJournal.remove(file);
        this.unfinishedOrphans.splice(this.unfinishedOrphans.indexOf(file), 1);
      } catch (error) {
        // The file stays claimed, for the next call; the others go on.
        failure ??= error;
      }
    }
    if (failure) throw failure;
    return written;
  }

  /** Orphaned settlements in one statement; if that fails, each on its own, its usage record optional. */
  private async settleOrphans(orders: SettlementOrder[]): Promise<number> {
    const applied = (settlements: Settlement[]) => settlements.filter((settlement) => settlement.applied).length;
    try {
      return applied(await this.ports.wallet.settleMany(orders));
    } catch (error) {
      if (isDatabaseUnavailable(error)) throw error;
      let written = 0;
      for (const order of orders) written += applied(await this.ports.wallet.settleMany([order], { recordsOptional: true }));
      return written;
    }
  }

  /** Queues a journaled settlement; flushed() waits for it until it commits or fails. */
  private queueJournaled(job: SettlementJob, usageRow: Record<string, unknown>, journaled: Journaled): void {
    const workspaceId = job.order.charge.workspaceId;
    let pending = this.journaled.get(workspaceId);
    if (!pending) this.journaled.set(workspaceId, (pending = new Set<Promise<void>>()));
    let settled!: () => void;
    const done = new Promise<void>((resolve) => (settled = resolve));
    const finish = () => {
      pending.delete(done);
      if (pending.size === 0 && this.journaled.get(workspaceId) === pending) this.journaled.delete(workspaceId);
      settled();
    };
    pending.add(done);
    this.queue.push({ job, usageRow, resolve: finish, reject: finish, journaled });
    this.kick();
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
    let settlements: Settlement[];
    try {
      settlements = await this.settle(batch, false);
    } catch (error) {
      if (isDatabaseUnavailable(error)) return batch.forEach((queued) => this.failed(queued, error));
      for (const queued of batch) await this.writeCarefully(queued);
      return;
    }
    // Outside the try: what follows a commit must never make it written a second time.
    this.committed(batch, settlements);
  }

  private async writeCarefully(queued: Queued): Promise<void> {
    let settlement: Settlement;
    try {
      [settlement] = await this.settle([queued], true);
    } catch (error) {
      return this.failed(queued, error);
    }
    if (settlement.usageRecordRefused) this.ports.incident('usage_record_not_stored', queued.job.requestId, settlement.usageRecordRefused);
    this.committed([queued], [settlement]);
  }

  /**
   * A settlement that could not be written fails its request, which may try again; a
   * journaled or delivered one (its request answered already) is tried again here, after a
   * pause that grows with each failure, until it commits.
   */
  private failed(queued: Queued, error: unknown): void {
    if (isDatabaseUnavailable(error)) this.databaseGone = true;
    const { job } = queued;
    const journaled = queued.journaled ?? this.keepDelivered(queued);
    if (!journaled) return queued.reject(error);
    queued.resolve(null);
    // After the stop, nothing is tried again: one in the journal stays there, one in memory is handed over.
    if (this.closed) return journaled.kept ? undefined : this.handOver([queued], error);
    const delayMs = Math.min(RETRY_FIRST_MS * 2 ** journaled.attempts, RETRY_MOST_MS);
    quietly(() => this.ports.retrying?.(job, error, delayMs));
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      // It may have committed unseen: its ledger rows are looked up first.
      this.queueJournaled({ ...job, order: { ...job.order, retry: true } }, queued.usageRow, { ...journaled, attempts: journaled.attempts + 1 });
    }, delayMs).unref();
    this.retryTimers.set(timer, { queued, journaled });
  }

  /**
   * A delivered stream's settlement that could not be written: journaled now, so that it
   * outlives this process, and tried again like any journaled one. Its conversation turn is
   * written with it by this process only (the journal keeps the charge and the usage record).
   */
  private keepDelivered({ job, usageRow }: Queued): Journaled | undefined {
    if (!job.delivered || job.order.refund) return undefined;
    const journal = this.ports.journal;
    if (!journal) return { attempts: 0 };
    try {
      return { kept: { journal, segment: journal.append(journalEntry(job, usageRow)) }, attempts: 0 };
    } catch (error) {
      quietly(() => this.ports.journalFailed?.(job, error));
      return { attempts: 0 };
    }
  }

  /** The stop's last try to write settlements kept in memory alone; what fails is handed over. */
  private async lastAttempt(kept: Queued[]): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`not written within ${CLOSE_ATTEMPT_MS} ms of the stop`)), CLOSE_ATTEMPT_MS);
    });
    let settlements: Settlement[];
    try {
      // Careful: each may have committed unseen before.
      settlements = await Promise.race([this.settle(kept, true), deadline]);
    } catch (error) {
      // Even one that commits after the deadline is safe to write again: it is keyed by its hold.
      return this.handOver(kept, error);
    } finally {
      clearTimeout(timer);
    }
    this.committed(kept, settlements);
  }

  /**
   * Settlements kept in memory alone that this process will not write (it stops): appended
   * to the journal, for the next start to write, or, failing that, reported (ports.unwritten).
   */
  private handOver(batch: Queued[], error: unknown): void {
    const journal = this.lastResort;
    for (const { job, usageRow } of batch) {
      let journaled = false;
      if (journal) {
        try {
          journal.append(journalEntry(job, usageRow));
          journaled = true;
        } catch (appendError) {
          quietly(() => this.ports.journalFailed?.(job, appendError));
        }
      }
      quietly(() => this.ports.unwritten?.(job, journaled, error));
      quietly(() => job.released?.());
    }
    // Its file stays (its entries are pending) for the next start.
    journal?.close();
  }

  private settle(batch: Queued[], careful: boolean): Promise<Settlement[]> {
    // Written out, not spread: see usageRecord (usage-record.ts) for why, on the hot path.
    const orders = batch.map(
      ({ job: { order }, usageRow }): SettlementOrder => ({
        hold: order.hold,
        charge: order.charge,
        refund: order.refund,
        retry: careful || order.retry,
        heldIn: order.heldIn,
        usageRow,
      }),
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
    this.databaseGone = false;
    const records = batch.flatMap(({ job }, index) => {
      const settlement = settlements[index];
      // The charge first, the record spread after it: see usageRecord (usage-record.ts).
      return settlement.applied && !settlement.usageRecordRefused ? [{ chargedMillicents: settlement.keptMillicents, ...job.record }] : [];
    });
    // What is told after a commit must not fail it (it is written: see write()).
    quietly(() => this.ports.committed?.(records));
    batch.forEach(({ job, resolve, journaled }, index) => {
      const settlement = settlements[index];
      if (settlement.writtenOffMillicents > 0) quietly(() => this.ports.writtenOff?.(job, settlement));
      journaled?.kept?.journal.committed(journaled.kept.segment);
      quietly(() => job.released?.());
      resolve(settlement);
    });
  }
}

/** What the journal keeps of a settlement. */
function journalEntry(job: SettlementJob, usageRow: Record<string, unknown>): JournalEntry {
  const { hold, charge } = job.order;
  return {
    requestId: job.requestId,
    key: hold.id,
    workspaceId: charge.workspaceId,
    heldIn: { rowId: hold.lease?.id ?? hold.id, lease: hold.lease !== undefined },
    costMicros: charge.costMicros.toString(),
    description: charge.description,
    usageRow,
  };
}

/**
 * A settlement of a process that died, as an order of this one: its money was set aside in
 * the dead process's hold or lease (if that was swept meanwhile, the charge comes out of the
 * wallet's free balance), and it may have committed before the process died.
 */
function orphanOrder(entry: JournalEntry): SettlementOrder {
  return {
    hold: { id: entry.key, workspaceId: entry.workspaceId, amountMillicents: 0 },
    heldIn: entry.heldIn,
    charge: { workspaceId: entry.workspaceId, costMicros: BigInt(entry.costMicros), description: entry.description },
    retry: true,
    usageRow: entry.usageRow,
  };
}

/** Runs a callback whose failure must not undo what came before it. */
function quietly(callback: () => void): void {
  try {
    callback();
  } catch {
    // A metrics or log callback: nothing to do about it here.
  }
}
