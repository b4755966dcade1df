import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { EntityManager } from 'typeorm';
import type { NewUsageRecord } from '../usage/usage.service';
import type { Lease } from '../wallet/wallet-leases';
import type { Settlement, SettlementOrder } from '../wallet/wallet.service';
import { JournalEntry, ProcessIdentity, SettlementJournal } from './settlement-journal';
import { SettlementJob, SettlementWriter, SettlementWriterPorts } from './settlement-writer';

/** A manager that accepts any statement (savepoints). */
const manager = { query: async () => [] } as unknown as EntityManager;

/** A request admitted from the process's budget lease: what the journal takes. */
function leasedJob(id: string): SettlementJob {
  const leased = job(id);
  leased.order.hold.lease = { id: 'lease-1' } as Lease;
  return leased;
}

function job(id: string, costMicros = 1_000_000n): SettlementJob {
  return {
    requestId: id,
    order: { hold: { id, workspaceId: 'ws', amountMillicents: 10 }, charge: { workspaceId: 'ws', costMicros, description: id } },
    record: { requestId: id } as NewUsageRecord,
    turn: null,
  };
}

/**
 * The wallet's settleMany, one batch at a time, each taking until released by the test; the
 * usage rows of a batch that commits are kept, as the database keeps them.
 */
class SlowWallet {
  batches: string[][] = [];
  /** Each batch's orders as the database got them. */
  orders: SettlementOrder[][] = [];
  /** Requests the database refuses whole (their batch fails with this error). */
  poisoned = new Map<string, Error>();
  /** Requests whose usage record the database refuses: the batch fails, but a careful settlement leaves the record out. */
  refusedRecords = new Set<string>();
  records: unknown[] = [];
  private gate: (() => void) | null = null;

  async settleMany(
    orders: SettlementOrder[],
    options: { alsoInTransaction?: (manager: EntityManager, settlements: Settlement[]) => Promise<void>; recordsOptional?: boolean } = {},
  ): Promise<Settlement[]> {
    this.batches.push(orders.map((order) => order.hold.id));
    this.orders.push(orders);
    await new Promise<void>((resolve) => (this.gate = resolve));
    const poison = orders.map((order) => this.poisoned.get(order.hold.id)).find(Boolean);
    if (poison) throw poison;
    const refused = orders.map((order) => order.usageRow && this.refusedRecords.has(order.hold.id));
    if (refused.some(Boolean) && !options.recordsOptional) throw new Error('usage record refused');
    const settlements: Settlement[] = orders.map((_, index) => ({
      chargedMillicents: 1,
      keptMillicents: 1,
      writtenOffMillicents: 0,
      balanceAfterMillicents: 0,
      applied: true,
      ...(refused[index] && { usageRecordRefused: '22003: numeric field overflow' }),
    }));
    await options.alsoInTransaction?.(manager, settlements);
    this.records.push(...orders.flatMap((order, index) => (order.usageRow && !refused[index] ? [order.usageRow] : [])));
    return settlements;
  }

  /** Lets the batch under way commit. */
  async commit(): Promise<void> {
    while (!this.gate) await new Promise((resolve) => setImmediate(resolve));
    const open = this.gate;
    this.gate = null;
    open();
  }
}

function setUp(journal?: SettlementJournal, ports: Partial<SettlementWriterPorts> = {}) {
  const wallet = new SlowWallet();
  const incidents: string[] = [];
  const committed: NewUsageRecord[] = [];
  const writer = new SettlementWriter({
    wallet,
    usage: { row: (record) => ({ ...record }) },
    conversations: { appendTurn: async () => null },
    incident: (kind, requestId) => void incidents.push(`${kind} ${requestId}`),
    committed: (records) => void committed.push(...records),
    journal,
    ...ports,
  });
  return { wallet, writer, records: wallet.records as NewUsageRecord[], incidents, committed };
}

describe('SettlementWriter', () => {
  it('writes a lone settlement at once, and those that end meanwhile together in the next transaction', async () => {
    const { wallet, writer, records } = setUp();
    const first = writer.submit(job('a'));
    const later = [writer.submit(job('b')), writer.submit(job('c')), writer.submit(job('d'))];
    await wallet.commit();
    await first;
    await wallet.commit();
    await Promise.all(later);
    expect(wallet.batches).toEqual([['a'], ['b', 'c', 'd']]);
    expect(records.map((record) => record.requestId)).toEqual(['a', 'b', 'c', 'd']);
    await writer.idle();
  });

  it('resolves a request only once its transaction has committed', async () => {
    const { wallet, writer } = setUp();
    let done = false;
    const settled = writer.submit(job('a')).then(() => (done = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(done).toBe(false);
    await wallet.commit();
    await settled;
    expect(done).toBe(true);
  });

  it('writes a failed batch again one settlement at a time, so only the bad one fails', async () => {
    const { wallet, writer, records } = setUp();
    wallet.poisoned.set('bad', Object.assign(new Error('deadlock detected'), { code: '40P01' }));
    const first = writer.submit(job('first'));
    const results = [writer.submit(job('ok1')), writer.submit(job('bad')), writer.submit(job('ok2'))].map((promise) =>
      promise.then(
        () => 'settled',
        (error: Error) => error.message,
      ),
    );
    await wallet.commit(); // first
    await first;
    await wallet.commit(); // the batch of three: fails
    await wallet.commit(); // ok1
    await wallet.commit(); // bad: fails, for its request to retry (never again without its record)
    await wallet.commit(); // ok2
    expect(await Promise.all(results)).toEqual(['settled', 'deadlock detected', 'settled']);
    expect(wallet.batches).toEqual([['first'], ['ok1', 'bad', 'ok2'], ['ok1'], ['bad'], ['ok2']]);
    expect(records.map((record) => record.requestId)).toEqual(['first', 'ok1', 'ok2']);
  });

  it('still commits a charge whose usage record the database refuses, counts the incident, and tells the metrics what was charged', async () => {
    const { wallet, writer, records, incidents, committed } = setUp();
    wallet.refusedRecords.add('norecord');
    const results = [writer.submit(job('ok')), writer.submit(job('norecord'))];
    await wallet.commit(); // ok, written at once
    await wallet.commit(); // norecord: refused
    await wallet.commit(); // norecord again, carefully: its record left out
    expect((await Promise.all(results)).map((settlement) => settlement?.applied)).toEqual([true, true]);
    expect(wallet.batches).toEqual([['ok'], ['norecord'], ['norecord']]);
    expect(records.map((record) => record.requestId)).toEqual(['ok']);
    expect(incidents).toEqual(['usage_record_not_stored norecord']);
    // The metrics count the records stored.
    expect(committed.map((record) => [record.requestId, record.chargedMillicents])).toEqual([['ok', 1]]);
  });

  it('fails a whole batch at once when the database is gone, without writing it again one at a time', async () => {
    const { wallet, writer } = setUp();
    wallet.poisoned.set('a', Object.assign(new Error('Connection terminated unexpectedly'), {}));
    const first = writer.submit(job('first'));
    const results = [writer.submit(job('a')), writer.submit(job('b'))].map((promise) => promise.then(() => 'settled', (error: Error) => error.message));
    await wallet.commit(); // first
    await first;
    await wallet.commit(); // a and b: the connection is lost
    expect(await Promise.all(results)).toEqual(['Connection terminated unexpectedly', 'Connection terminated unexpectedly']);
    expect(wallet.batches).toEqual([['first'], ['a', 'b']]);
    await writer.idle();
  });

  describe('at the stop, with a delivered settlement kept in memory alone (SETTLEMENT_DURABILITY=commit, the database gone)', () => {
    let dir: string;
    beforeEach(() => {
      dir = mkdtempSync(path.join(tmpdir(), 'acs-writer-stop-'));
    });
    afterEach(() => rmSync(dir, { recursive: true, force: true }));
    const lost = () => new Error('Connection terminated unexpectedly');
    /** The journal of this process as the next start sees it: a process that is gone (a pid above Linux's pid_max). */
    const gone = () => new SettlementJournal(dir, new ProcessIdentity(ProcessIdentity.current().host, 4_194_304 + 20, '1'));

    function stopping(lastResort?: SettlementJournal) {
      const unwritten: string[] = [];
      const set = setUp(undefined, {
        unwritten: ({ requestId, order: { charge } }, journaled) =>
          void unwritten.push(`${requestId} ${charge.workspaceId} ${charge.costMicros} ${journaled ? 'journaled' : 'lost'}`),
      });
      if (lastResort) set.writer.lastResortIn(lastResort);
      return { ...set, unwritten };
    }

    /** A delivered stream whose settlement finds the database gone: kept in memory, its retry timer set. */
    async function keptInMemory(wallet: SlowWallet, writer: SettlementWriter, id: string, released?: () => void): Promise<void> {
      wallet.poisoned.set(id, lost());
      const answered = writer.submit({ ...job(id), delivered: true, released });
      await wallet.commit();
      await expect(answered).resolves.toBeNull();
      await writer.idle();
    }

    it('tries once more at close(), and writes it when the database is back', async () => {
      const { wallet, writer, records, unwritten } = stopping(gone());
      let released = 0;
      await keptInMemory(wallet, writer, 'stream', () => released++);
      expect(released).toBe(0);
      wallet.poisoned.clear();
      const closed = writer.close();
      await wallet.commit(); // the last try: commits
      await closed;
      expect(records.map((record) => record.requestId)).toEqual(['stream']);
      expect(wallet.orders.at(-1)![0].retry).toBe(true);
      expect(released).toBe(1);
      expect(unwritten).toEqual([]);
      expect(readdirSync(dir)).toEqual([]);
    });

    it('journals what the last try could not write, and the next start writes it', async () => {
      const { wallet, writer, records, unwritten } = stopping(gone());
      let released = 0;
      await keptInMemory(wallet, writer, 'stream', () => released++);
      const closed = writer.close();
      await wallet.commit(); // the last try: the database is still gone
      await closed;
      expect(unwritten).toEqual(['stream ws 1000000 journaled']);
      expect(released).toBe(1);
      expect(records).toEqual([]);

      // The next process on this DATA_DIR.
      const next = setUp();
      const written = next.writer.writeOrphans(new SettlementJournal(dir));
      await next.wallet.commit();
      expect(await written).toBe(1);
      expect(next.wallet.orders[0].map(({ hold, heldIn, retry, charge }) => ({ key: hold.id, heldIn, retry, cost: charge.costMicros }))).toEqual([
        { key: 'stream', heldIn: { rowId: 'stream', lease: false }, retry: true, cost: 1_000_000n },
      ]);
      expect(next.records.map((record) => record.requestId)).toEqual(['stream']);
      expect(readdirSync(dir)).toEqual([]);
    });

    it('bounds the last try: a database that does not answer is given a few seconds, then the settlement is journaled', async () => {
      const { wallet, writer, unwritten } = stopping(gone());
      await keptInMemory(wallet, writer, 'stream');
      const started = Date.now();
      await writer.close(); // the last try never answers
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(unwritten).toEqual(['stream ws 1000000 journaled']);
      expect(SettlementJournal.read(path.join(dir, readdirSync(dir)[0])).map((entry) => entry.key)).toEqual(['stream']);
      void wallet.commit();
    }, 15_000);

    it('reports it, with its request, workspace and cost, when no journal can take it', async () => {
      const journal = gone();
      jest.spyOn(journal, 'append').mockImplementation(() => {
        throw new Error('ENOSPC: no space left on device');
      });
      const { wallet, writer, unwritten } = stopping(journal);
      await keptInMemory(wallet, writer, 'stream');
      const closed = writer.close();
      await wallet.commit();
      await closed;
      expect(unwritten).toEqual(['stream ws 1000000 lost']);
    });

    it('hands a settlement kept after close() over at once, with no retry timer', async () => {
      const { wallet, writer, unwritten } = stopping(gone());
      await writer.close();
      await keptInMemory(wallet, writer, 'late');
      expect(unwritten).toEqual(['late ws 1000000 journaled']);
      expect((writer as unknown as { retryTimers: Map<unknown, unknown> }).retryTimers.size).toBe(0);
      expect(SettlementJournal.read(path.join(dir, readdirSync(dir)[0])).map((entry) => entry.key)).toEqual(['late']);
    });

    it('does not hold the process up with its retry timers', async () => {
      const { wallet, writer } = stopping(gone());
      await keptInMemory(wallet, writer, 'stream');
      const timers = [...(writer as unknown as { retryTimers: Map<NodeJS.Timeout, unknown> }).retryTimers.keys()];
      expect(timers).toHaveLength(1);
      expect(timers[0].hasRef()).toBe(false);
      wallet.poisoned.clear();
      const closed = writer.close();
      await wallet.commit();
      await closed;
    });
  });

  describe('with a journal (SETTLEMENT_DURABILITY=journal)', () => {
    let dir: string;
    beforeEach(() => {
      dir = mkdtempSync(path.join(tmpdir(), 'acs-writer-'));
    });
    afterEach(() => rmSync(dir, { recursive: true, force: true }));
    const journalFiles = () => (existsSync(dir) ? readdirSync(dir) : []);

    /** A journal of a dead process (a pid above Linux's pid_max) holding these settlements. */
    function orphanJournal(pid: number, entries: { key: string; heldIn: JournalEntry['heldIn']; costMicros: string }[]): void {
      const journal = new SettlementJournal(dir, new ProcessIdentity(ProcessIdentity.current().host, 4_194_304 + pid, '1'));
      for (const { key, heldIn, costMicros } of entries) {
        journal.append({ requestId: `req_${key}`, key, workspaceId: 'ws', heldIn, costMicros, description: key, usageRow: { request_id: `req_${key}` } });
      }
    }

    it('answers a plain settlement once it is journaled, before its commit; reads wait for the commit', async () => {
      const { wallet, writer, records } = setUp(new SettlementJournal(dir));
      await expect(writer.submit(leasedJob('a'))).resolves.toBeNull();
      const [file] = journalFiles();
      expect(SettlementJournal.read(path.join(dir, file)).map((entry) => entry.key)).toEqual(['a']);
      expect(records).toEqual([]);

      let flushed = false;
      const reads = writer.flushed('ws').then(() => (flushed = true));
      await new Promise((resolve) => setImmediate(resolve));
      expect(flushed).toBe(false);
      await wallet.commit();
      await reads;
      expect(records.map((record) => record.requestId)).toEqual(['a']);
      await writer.close();
      expect(journalFiles()).toEqual([]);
    });

    it('journals no refund, conversation turn, Idempotency-Key request or request on a hold of its own: they are answered once they commit', async () => {
      const { wallet, writer } = setUp(new SettlementJournal(dir));
      const turn = { ...leasedJob('turn'), turn: {} as SettlementJob['turn'] };
      const refund = leasedJob('refund');
      refund.order.refund = true;
      const idempotent = { ...leasedJob('idempotent'), waitForCommit: true };
      const ownHold = job('own-hold');
      let answered = 0;
      const results = [writer.submit(turn), writer.submit(refund), writer.submit(idempotent), writer.submit(ownHold)].map((promise) =>
        promise.then((settlement) => (answered++, settlement)),
      );
      await new Promise((resolve) => setImmediate(resolve));
      expect(answered).toBe(0);
      await wallet.commit();
      await wallet.commit();
      expect((await Promise.all(results)).map((settlement) => settlement?.applied)).toEqual([true, true, true, true]);
      expect(journalFiles()).toEqual([]);
    });

    it('journals a delivered stream whose settlement finds the database gone (on a hold of its own too), and writes it once the database answers', async () => {
      const { wallet, writer, records } = setUp(new SettlementJournal(dir));
      const lost = new Error('Connection terminated unexpectedly');
      // A first settlement's failure tells the writer the database is gone: nothing is journaled up front any more.
      wallet.poisoned.set('first', lost);
      wallet.poisoned.set('stream', lost);
      const first = writer.submit(job('first')).catch((error: Error) => error.message);
      await wallet.commit();
      expect(await first).toBe('Connection terminated unexpectedly');
      const stream = { ...job('stream'), delivered: true };
      const answered = writer.submit(stream);
      await wallet.commit(); // the database is still gone: journaled now, and answered
      await expect(answered).resolves.toBeNull();
      const [file] = journalFiles();
      expect(SettlementJournal.read(path.join(dir, file)).map((entry) => [entry.key, entry.heldIn])).toEqual([['stream', { rowId: 'stream', lease: false }]]);
      wallet.poisoned.clear();
      await wallet.commit(); // the retry, 500 ms later: commits
      await writer.flushed('ws');
      expect(records.map((record) => record.requestId)).toEqual(['stream']);
      expect(wallet.orders.at(-1)![0].retry).toBe(true);
      await writer.close();
      expect(journalFiles()).toEqual([]);
    });

    it('writes a journaled settlement that failed again, as a retry, until it commits; its request never sees the failure', async () => {
      const { wallet, writer, records } = setUp(new SettlementJournal(dir));
      wallet.poisoned.set('a', new Error('deadlock detected'));
      await expect(writer.submit(leasedJob('a'))).resolves.toBeNull();
      await wallet.commit(); // the batch: fails
      await wallet.commit(); // carefully, on its own: fails again; tried again after a pause
      wallet.poisoned.clear();
      await wallet.commit(); // the retry: commits
      await writer.flushed('ws');
      await writer.idle();
      expect(wallet.batches).toEqual([['a'], ['a'], ['a']]);
      // The retry looks up what may have committed unseen.
      expect(wallet.orders[2][0].retry).toBe(true);
      expect(records.map((record) => record.requestId)).toEqual(['a']);
      await writer.close();
      expect(journalFiles()).toEqual([]);
    });

    it('sends a settlement the journal cannot take (a full disk) down the commit path, and says so', async () => {
      const journal = new SettlementJournal(dir);
      jest.spyOn(journal, 'append').mockImplementation(() => {
        throw new Error('ENOSPC: no space left on device');
      });
      const failures: string[] = [];
      const wallet = new SlowWallet();
      const writer = new SettlementWriter({
        wallet,
        usage: { row: (record) => ({ ...record }) },
        conversations: { appendTurn: async () => null },
        incident: () => undefined,
        journalFailed: ({ requestId }, error) => void failures.push(`${requestId}: ${(error as Error).message}`),
        journal,
      });
      let answered = false;
      const settled = writer.submit(leasedJob('a')).then((settlement) => ((answered = true), settlement));
      await new Promise((resolve) => setImmediate(resolve));
      expect(answered).toBe(false);
      await wallet.commit();
      expect((await settled)?.applied).toBe(true);
      expect(failures).toEqual(['a: ENOSPC: no space left on device']);
    });

    it('journals nothing while the database is gone: requests wait for their commit (and fail with it) until one commits again', async () => {
      const { wallet, writer } = setUp(new SettlementJournal(dir));
      wallet.poisoned.set('a', new Error('Connection terminated unexpectedly'));
      await expect(writer.submit(leasedJob('a'))).resolves.toBeNull();
      await wallet.commit(); // a: the connection is lost; a waits for its retry
      await new Promise((resolve) => setImmediate(resolve));
      wallet.poisoned.clear();
      wallet.poisoned.set('b', new Error('Connection terminated unexpectedly'));
      const b = writer.submit(leasedJob('b')).then(
        () => 'answered',
        (error: Error) => error.message,
      );
      await wallet.commit(); // b, not journaled: fails with its request
      expect(await b).toBe('Connection terminated unexpectedly');
      wallet.poisoned.clear();
      const c = writer.submit(leasedJob('c'));
      await wallet.commit(); // c, not journaled either: commits
      expect((await c)?.applied).toBe(true);
      // The database is back: answered from the journal again.
      await expect(writer.submit(leasedJob('d'))).resolves.toBeNull();
      await wallet.commit(); // d
      await wallet.commit(); // a's retry
      await writer.flushed('ws');
      expect(wallet.batches).toEqual([['a'], ['b'], ['c'], ['d'], ['a']]);
      await writer.close();
    });

    it("writes the journal of a process that died, as retries from the dead process's hold or lease, and deletes it", async () => {
      const heldIn = { rowId: 'lease-of-the-dead', lease: true };
      orphanJournal(9, [
        { key: 'x', heldIn, costMicros: '22500000' },
        { key: 'y', heldIn, costMicros: '22500000' },
      ]);
      const { wallet, writer, records } = setUp(new SettlementJournal(dir));
      const written = writer.writeOrphans(new SettlementJournal(dir));
      await wallet.commit();
      expect(await written).toBe(2);
      expect(wallet.orders[0].map(({ hold, heldIn, retry, charge }) => ({ key: hold.id, lease: hold.lease, heldIn, retry, cost: charge.costMicros }))).toEqual([
        { key: 'x', lease: undefined, heldIn: { rowId: 'lease-of-the-dead', lease: true }, retry: true, cost: 22_500_000n },
        { key: 'y', lease: undefined, heldIn: { rowId: 'lease-of-the-dead', lease: true }, retry: true, cost: 22_500_000n },
      ]);
      expect(records).toEqual([{ request_id: 'req_x' }, { request_id: 'req_y' }]);
      expect(journalFiles()).toEqual([]);
    });

    it('keeps the journal of a process that died when it cannot be written, and writes it on a later call', async () => {
      orphanJournal(10, [{ key: 'z', heldIn: { rowId: 'hold-z', lease: false }, costMicros: '1000000' }]);
      const { wallet, writer } = setUp(new SettlementJournal(dir));
      wallet.poisoned.set('z', new Error('could not serialize access'));
      const first = writer.writeOrphans(new SettlementJournal(dir));
      await wallet.commit(); // fails
      await wallet.commit(); // again, its record optional: fails too
      await expect(first).rejects.toThrow('could not serialize access');
      expect(journalFiles()).toHaveLength(1);
      wallet.poisoned.clear();
      const second = writer.writeOrphans(new SettlementJournal(dir));
      await wallet.commit();
      expect(await second).toBe(1);
      expect(journalFiles()).toEqual([]);
    });

    it('writes a lone orphaned settlement whose usage record the database refuses, without its record', async () => {
      orphanJournal(11, [{ key: 'r', heldIn: { rowId: 'lease-r', lease: true }, costMicros: '1000000' }]);
      const { wallet, writer, records } = setUp(new SettlementJournal(dir));
      wallet.refusedRecords.add('r');
      const written = writer.writeOrphans(new SettlementJournal(dir));
      await wallet.commit(); // refused
      await wallet.commit(); // its record optional: the charge commits
      expect(await written).toBe(1);
      expect(wallet.orders[1][0].retry).toBe(true);
      expect(records).toEqual([]);
      expect(journalFiles()).toEqual([]);
    });

    it('counts a journaled settlement committed once even when what follows its commit fails', async () => {
      const wallet = new SlowWallet();
      const journal = new SettlementJournal(dir);
      const writer = new SettlementWriter({
        wallet,
        usage: { row: (record) => ({ ...record }) },
        conversations: { appendTurn: async () => null },
        incident: () => undefined,
        committed: () => {
          throw new Error('metrics broke');
        },
        journal,
      });
      await writer.submit(leasedJob('a'));
      await writer.submit(leasedJob('b'));
      await wallet.commit();
      await wallet.commit();
      await writer.flushed('ws');
      await writer.idle();
      // Written once each, never again carefully.
      expect(wallet.batches).toEqual([['a'], ['b']]);
      await writer.close();
      expect(journalFiles()).toEqual([]);
    });
  });
});
