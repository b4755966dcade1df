import { BeforeApplicationShutdown, Injectable, Logger } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import type { PostgresDataSourceOptions } from 'typeorm/driver/postgres/PostgresDataSourceOptions';
import { queryRows } from '../common/database/query-rows';
import { PendingSettlements } from '../common/settlements/pending-settlements';
import { isDatabaseUnavailable } from '../common/errors/database-unavailable';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';

/** A lease lives this long past its last heartbeat (at most; HOLD_TTL_MS when shorter). */
const MAX_LEASE_TTL_MS = 60_000;
/** A lease is asked for this many times what the request needs, at least. */
const LEASE_MULTIPLE = 64;
/** After the wallet refused a lease, requests as large go straight to holds of their own for this long. */
const REFUSAL_MEMORY_MS = 1_000;
/** How long a stopping process waits for its leased requests to settle before giving back what it can. */
const SHUTDOWN_WAIT_MS = 5_000;
/** How often what a lease's requests hold is written to its row when it changed: other replicas' figure lags by less than a second. */
const REPORT_INTERVAL_MS = 500;
/** How long a request the wallet could not cover waits for the other processes to give back their leases' spare. */
const RECALL_WAIT_MS = 300;
/** A statement on the leases that failed (the database away) is tried again after this, doubling up to RETRY_MAX_MS. */
const RETRY_MIN_MS = 200;
const RETRY_MAX_MS = 2_000;
/** Asks the processes leasing from a workspace's wallet to give back their spare (payload: workspace, asking process). */
const RECALL_CHANNEL = 'wallet_lease_recall';
/** A process answered a recall for one of its leases (payload: the lease's id). */
const RETURNED_CHANNEL = 'wallet_lease_returned';

/** A budget this process has reserved from a wallet, and what it has admitted from it. */
export interface Lease {
  /** The lease's row in wallet_holds. */
  readonly id: string;
  readonly workspaceId: string;
  /** What the row sets aside (in `reserved`), as this process knows it. */
  amount: number;
  /** What requests in flight were admitted with. */
  admitted: number;
  /** `admitted` as last written to the row's held_millicents (what other processes show as reserved). */
  reported: number;
  lastUsedAt: number;
  /** Last time its row was seen alive (made, grown or its expiry pushed out). */
  confirmedAt: number;
  /** No longer admits (returned, or its row found gone); its requests still settle against it. */
  retired: boolean;
}

/**
 * Budget leases: how a request's money is set aside without a write to the wallet's row.
 * A process reserves a budget from a workspace's wallet in one conditional statement (the
 * same `balance - reserved >= amount` as a hold, so no set of processes can ever set aside
 * more than the wallet has), and admits that workspace's requests from it in memory. The
 * lease is a row of wallet_holds, so `reserved` is the sum of holds and leases, and the
 * sweeper gives back the lease of a process that died. It grows when it runs short (sized
 * from the request and the last second's spending), its charges are taken out of it at
 * settlement, and it goes back to the wallet once idle for WALLET_LEASE_IDLE_MS.
 *
 * A lease takes at most a quarter of what is available beyond the request's own need, so
 * that another replica can still lease; a request the lease cannot cover falls back to a
 * hold of its own (WalletService.reserve), after this process's spare is given back, and
 * then after the other processes' spare is recalled (`recallOthers`, by NOTIFY).
 *
 * What a lease's requests hold (`admitted`) is written to its row's held_millicents at most
 * every REPORT_INTERVAL_MS, so that every replica shows as reserved what requests hold, not
 * the lease's spare (`heldBy` gives this process's own figure exactly). A statement that
 * failed because the database was away (extending, giving back) is tried again with backoff
 * until it answers: a lease is never left for the sweeper by a live process.
 */
@Injectable()
export class WalletLeases implements BeforeApplicationShutdown {
  private readonly logger = new Logger('WalletLeases');
  private readonly current = new Map<string, Lease>();
  /** Leases no longer admitting whose row may still be there: given back once their requests end. */
  private readonly retiring = new Set<Lease>();
  /** Per workspace: the lease statement under way, so that concurrent requests share one. */
  private readonly busy = new Map<string, Promise<unknown>>();
  /** Per workspace: when the wallet last refused to lease, and for how large a request. */
  private readonly refusedAt = new Map<string, { at: number; amount: number }>();
  /** Per workspace: millicents charged in the current and the last second. */
  private readonly spending = new Map<string, { since: number; charged: number; lastSecond: number }>();
  private readonly ttlMs: number;
  /** WALLET_LEASE_IDLE_MS: a lease unused this long goes back; 0, as soon as nothing is in flight. */
  private readonly idleMs: number;
  private readonly owner = `lease:${randomUUID()}`;
  private heartbeat?: NodeJS.Timeout;
  private idleCheck?: NodeJS.Timeout;
  private reporter?: NodeJS.Timeout;
  private reporting = false;
  private readonly retry = { extend: new Backoff(), giveBack: new Backoff(), listen: new Backoff() };
  /** The connection that LISTENs for recalls (and answers to this process's recalls); made on first use. */
  private listener?: Promise<Client | null>;
  /** Per lease id recalled by this process: who waits for its owner's answer. */
  private readonly awaitingReturn = new Map<string, Set<() => void>>();
  /** Recalls under way, by workspace: requests refused together share one ask (a wallet that is simply empty asks once, not once per request). */
  private readonly recalling = new Map<string, Promise<boolean>>();
  private stopping = false;

  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @InjectConfig() config: AppConfig,
    /** Absent where no chat request is served (the CLI). */
    private readonly pending: PendingSettlements,
  ) {
    this.ttlMs = Math.min(config.holdTtlMs, MAX_LEASE_TTL_MS);
    this.idleMs = config.walletLeaseIdleMs;
  }

  /**
   * Admits a request of `amount` millicents from the workspace's lease, taking or growing the
   * lease when it runs short. Null when the wallet cannot lease that much: the caller falls
   * back to a hold of its own.
   */
  async admit(workspaceId: string, amount: number): Promise<Lease | null> {
    void this.listen();
    for (let attempt = 0; attempt < 3 && !this.stopping; attempt++) {
      const lease = this.usable(workspaceId);
      if (lease && lease.amount - lease.admitted >= amount) {
        lease.admitted += amount;
        lease.lastUsedAt = Date.now();
        return lease;
      }
      // The wallet just refused to lease this much: a hold of its own decides, without another try.
      const refused = this.refusedAt.get(workspaceId);
      if (refused && Date.now() - refused.at < REFUSAL_MEMORY_MS && amount >= refused.amount) return null;
      const need = amount - (lease ? lease.amount - lease.admitted : 0);
      if (!(await this.serially(workspaceId, () => this.grow(workspaceId, need, amount)))) {
        this.refusedAt.set(workspaceId, { at: Date.now(), amount });
        return null;
      }
      this.refusedAt.delete(workspaceId);
    }
    return null;
  }

  /** Takes `extra` more for a request admitted from `lease`, if the lease (or the wallet, by growing it) covers it. */
  async admitMore(lease: Lease, extra: number): Promise<boolean> {
    if (lease.retired || lease !== this.current.get(lease.workspaceId)) return false;
    const spare = lease.amount - lease.admitted;
    if (spare < extra && !(await this.serially(lease.workspaceId, () => this.grow(lease.workspaceId, extra - spare, extra)))) return false;
    if (lease.retired || lease.amount - lease.admitted < extra) return false;
    lease.admitted += extra;
    return true;
  }

  /** A leased request ended without a charge (or its settlement gave up): its admission goes back to the lease. */
  async release(lease: Lease, amount: number): Promise<void> {
    lease.admitted -= amount;
    await this.returnIfIdle(lease);
  }

  /** A leased request's settlement committed: its admission ends, and its charge left the lease's row. */
  async settled(lease: Lease, admitted: number, releasedFromLease: number, charged: number): Promise<void> {
    lease.admitted -= admitted;
    lease.amount -= releasedFromLease;
    const now = Date.now();
    const spending = this.spending.get(lease.workspaceId) ?? { since: now, charged: 0, lastSecond: 0 };
    if (now - spending.since >= 1_000) {
      spending.lastSecond = now - spending.since < 2_000 ? spending.charged : 0;
      spending.since = now;
      spending.charged = 0;
    }
    spending.charged += charged;
    this.spending.set(lease.workspaceId, spending);
    await this.returnIfIdle(lease);
  }

  /** With WALLET_LEASE_IDLE_MS=0, a lease goes back as its last request ends, before that request is answered. */
  private async returnIfIdle(lease: Lease): Promise<void> {
    if (lease.admitted > 0) return;
    if (lease.retired) {
      if (this.retiring.has(lease)) await this.giveBackRetired();
      return;
    }
    if (this.idleMs > 0) return;
    await this.serially(lease.workspaceId, async () => {
      if (lease.admitted === 0 && !lease.retired) await this.shrink(lease);
    }).catch((error) => this.logger.warn(`Could not give back lease ${lease.id}: ${String(error)}`));
  }

  /**
   * Gives back what the workspace's lease does not use, so that a request about to be refused
   * for want of money sees all of it. The lease's row goes too when nothing is admitted.
   */
  async returnSpare(workspaceId: string): Promise<void> {
    const lease = this.current.get(workspaceId);
    if (!lease || (lease.admitted > 0 && lease.amount - lease.admitted <= 0)) return;
    await this.serially(workspaceId, async () => {
      const lease = this.current.get(workspaceId);
      if (lease) await this.shrink(lease);
    });
  }

  /**
   * Asks the other processes leasing from the workspace's wallet to give back their spare
   * (what their requests in flight do not hold), and waits up to RECALL_WAIT_MS for their
   * answers: their idle spare is no reason to refuse or shorten a request the wallet can pay.
   * Each owner gives back its own spare, so no process ever admits from money given back.
   * False when there was nothing to recall (or no way to ask).
   */
  recallOthers(workspaceId: string): Promise<boolean> {
    const underWay = this.recalling.get(workspaceId);
    if (underWay) return underWay;
    const recall = this.recall(workspaceId).finally(() => this.recalling.delete(workspaceId));
    this.recalling.set(workspaceId, recall);
    return recall;
  }

  private async recall(workspaceId: string): Promise<boolean> {
    const listener = await this.listen();
    if (!listener) return false;
    const others = await queryRows<{ id: string }>(
      this.dataSource.manager,
      `SELECT id FROM wallet_holds WHERE workspace_id = $1 AND kind = 'lease' AND request_id <> $2 AND amount_millicents > 0`,
      [workspaceId, this.owner],
    );
    if (others.length === 0) return false;
    const answers: Promise<void>[] = [];
    const waiters: Array<[string, () => void]> = [];
    for (const { id } of others) {
      answers.push(
        new Promise<void>((resolve) => {
          const waiting = this.awaitingReturn.get(id) ?? new Set();
          waiting.add(resolve);
          this.awaitingReturn.set(id, waiting);
          waiters.push([id, resolve]);
        }),
      );
    }
    let timer: NodeJS.Timeout | undefined;
    try {
      await this.dataSource.manager.query(`SELECT pg_notify($1, $2)`, [RECALL_CHANNEL, `${workspaceId} ${this.owner}`]);
      await Promise.race([Promise.all(answers), new Promise<void>((resolve) => (timer = setTimeout(resolve, RECALL_WAIT_MS).unref()))]);
    } finally {
      clearTimeout(timer);
      for (const [id, resolve] of waiters) {
        const waiting = this.awaitingReturn.get(id);
        waiting?.delete(resolve);
        if (waiting?.size === 0) this.awaitingReturn.delete(id);
      }
    }
    return true;
  }

  /**
   * What this process's leases on the workspace's wallet hold for requests in flight, exactly,
   * and their rows (whose reported held_millicents may be up to REPORT_INTERVAL_MS old).
   */
  heldBy(workspaceId: string): { leaseIds: string[]; admitted: number } {
    const leaseIds: string[] = [];
    let admitted = 0;
    for (const lease of this.owned()) {
      if (lease.workspaceId !== workspaceId) continue;
      leaseIds.push(lease.id);
      admitted += lease.admitted;
    }
    return { leaseIds, admitted };
  }

  /** What this process holds in leases now, and what requests in flight were admitted with (for metrics). */
  inUse(): { leases: number; amount: number; admitted: number } {
    let amount = 0;
    let admitted = 0;
    for (const lease of this.current.values()) {
      amount += lease.amount;
      admitted += lease.admitted;
    }
    return { leases: this.current.size, amount, admitted };
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    clearInterval(this.heartbeat);
    clearInterval(this.idleCheck);
    clearInterval(this.reporter);
    for (const backoff of Object.values(this.retry)) backoff.cancel();
    const listener = this.listener;
    this.listener = Promise.resolve(null);
    void listener?.then((client) => client?.end()).catch(() => undefined);
    const deadline = Date.now() + SHUTDOWN_WAIT_MS;
    while (this.owned().some((lease) => lease.admitted > 0) && Date.now() < deadline) await sleep(20);
    for (const lease of this.owned()) {
      // A retired lease's row goes only once its requests ended: theirs settle against it.
      if (lease.retired && lease.admitted > 0) continue;
      await this.serially(lease.workspaceId, () => (lease.retired ? this.deleteRow(lease) : this.shrink(lease))).catch((error) =>
        this.logger.warn(`Could not give back lease ${lease.id}; the sweeper frees it at its expiry: ${String(error)}`),
      );
    }
  }

  /** The leases whose row may still be there: the current ones and those retiring. */
  private owned(): Lease[] {
    return [...this.current.values(), ...this.retiring];
  }

  /** The workspace's lease, if it may still admit: one not confirmed for half its life may have been swept. */
  private usable(workspaceId: string): Lease | null {
    const lease = this.current.get(workspaceId);
    if (!lease) return null;
    if (lease.retired || Date.now() - lease.confirmedAt > this.ttlMs / 2) {
      this.retire(lease);
      return null;
    }
    return lease;
  }

  /**
   * Takes a lease, or grows the current one, by at least `need`: as much as the request times
   * LEASE_MULTIPLE, or the last second's spending, but no more than a quarter of what the
   * wallet has available beyond `need`. One conditional statement on the wallet's row.
   */
  private async grow(workspaceId: string, need: number, amount: number): Promise<boolean> {
    const lease = this.usable(workspaceId);
    // Another request's statement may have made room meanwhile.
    if (lease && lease.amount - lease.admitted >= amount) return true;
    if (need <= 0) return true;
    const want = Math.max(2 * need, LEASE_MULTIPLE * amount, this.spending.get(workspaceId)?.lastSecond ?? 0);
    const manager = this.dataSource.manager;
    const ttl = this.ttlMs;
    if (lease) {
      // The lease's row is locked first (the sweeper's order: hold, then wallet).
      const rows = await queryRows<{ granted: string }>(
        manager,
        `WITH lease AS (SELECT id, workspace_id FROM wallet_holds WHERE id = $1 FOR UPDATE),
              granted AS (
                SELECT w.workspace_id,
                       LEAST($3::bigint, GREATEST($2::bigint, (w.balance_millicents - w.reserved_millicents - $2::bigint) / 4)) AS amount
                  FROM wallets w JOIN lease l ON l.workspace_id = w.workspace_id
                 WHERE w.balance_millicents - w.reserved_millicents >= $2::bigint
                   FOR UPDATE OF w),
              reserved AS (
                UPDATE wallets w SET reserved_millicents = w.reserved_millicents + g.amount, updated_at = now()
                  FROM granted g WHERE w.workspace_id = g.workspace_id
                RETURNING g.amount)
         UPDATE wallet_holds h
            SET amount_millicents = h.amount_millicents + r.amount,
                expires_at = now() + make_interval(secs => $4::double precision / 1000)
           FROM reserved r WHERE h.id = $1
         RETURNING r.amount AS granted`,
        [lease.id, need, want, ttl],
      );
      if (rows.length === 0) return false;
      lease.amount += Number(rows[0].granted);
      lease.confirmedAt = Date.now();
      return true;
    }
    const id = randomUUID();
    const rows = await queryRows<{ granted: string }>(
      manager,
      `WITH granted AS (
         SELECT workspace_id,
                LEAST($3::bigint, GREATEST($2::bigint, (balance_millicents - reserved_millicents - $2::bigint) / 4)) AS amount
           FROM wallets
          WHERE workspace_id = $1 AND balance_millicents - reserved_millicents >= $2::bigint
            FOR UPDATE),
            reserved AS (
         UPDATE wallets w SET reserved_millicents = w.reserved_millicents + g.amount, updated_at = now()
           FROM granted g WHERE w.workspace_id = g.workspace_id
         RETURNING g.amount)
       INSERT INTO wallet_holds (id, workspace_id, request_id, kind, amount_millicents, expires_at)
       SELECT $4, $1, $5, 'lease', amount, now() + make_interval(secs => $6::double precision / 1000) FROM reserved
       RETURNING amount_millicents AS granted`,
      [workspaceId, need, want, id, this.owner, ttl],
    );
    if (rows.length === 0) return false;
    const now = Date.now();
    this.current.set(workspaceId, {
      id,
      workspaceId,
      amount: Number(rows[0].granted),
      admitted: 0,
      reported: 0,
      lastUsedAt: now,
      confirmedAt: now,
      retired: false,
    });
    this.startTimers();
    return true;
  }

  /**
   * Gives back the lease's spare: all of it, row included, when nothing is admitted. The row
   * is locked before the wallet (the sweeper's order), and only what the row still had is
   * given back, so `reserved` stays the sum of holds and leases whatever this process believed.
   * What stays held is reported in the same statement.
   */
  private async shrink(lease: Lease): Promise<void> {
    if (lease.admitted <= 0) {
      this.retire(lease);
      try {
        await this.deleteRow(lease);
      } catch (error) {
        this.retry.giveBack.schedule(() => this.giveBackRetired());
        throw error;
      }
      return;
    }
    const spare = lease.amount - lease.admitted;
    if (spare <= 0) return;
    // Taken out first, so that no request is admitted from money on its way back.
    lease.amount -= spare;
    const held = lease.admitted;
    const rows = await queryRows<{ id: string }>(
      this.dataSource.manager,
      `WITH returned AS (
         UPDATE wallet_holds SET amount_millicents = amount_millicents - $2, held_millicents = $3
          WHERE id = $1 AND amount_millicents >= $2
         RETURNING workspace_id)
       UPDATE wallets w SET reserved_millicents = w.reserved_millicents - $2, updated_at = now()
         FROM returned r WHERE w.workspace_id = r.workspace_id
       RETURNING w.workspace_id AS id`,
      [lease.id, spare, held],
    );
    if (rows.length === 0) lease.amount += spare;
    else lease.reported = held;
  }

  /** Deletes a lease's row and gives back what it still had (nothing, when it was swept). */
  private async deleteRow(lease: Lease): Promise<void> {
    await this.dataSource.manager.query(
      `WITH returned AS (DELETE FROM wallet_holds WHERE id = $1 RETURNING workspace_id, amount_millicents)
       UPDATE wallets w SET reserved_millicents = w.reserved_millicents - r.amount_millicents, updated_at = now()
         FROM returned r WHERE w.workspace_id = r.workspace_id`,
      [lease.id],
    );
    this.retiring.delete(lease);
    lease.amount = 0;
  }

  /** Gives back the rows of retired leases whose requests have all ended; tried again with backoff while the database is away. */
  private async giveBackRetired(): Promise<void> {
    try {
      for (const lease of [...this.retiring]) {
        if (lease.admitted > 0 || !this.retiring.has(lease)) continue;
        await this.serially(lease.workspaceId, () => (this.retiring.has(lease) ? this.deleteRow(lease) : Promise.resolve()));
      }
      this.retry.giveBack.succeeded();
    } catch (error) {
      if (this.retry.giveBack.failures === 0) this.logger.warn(`Could not give back a retired lease; trying again until the database answers: ${String(error)}`);
      this.retry.giveBack.schedule(() => this.giveBackRetired());
    }
  }

  /** The lease admits no more; its row goes back once its requests end (at once when it has none). */
  private retire(lease: Lease): void {
    lease.retired = true;
    if (this.current.get(lease.workspaceId) === lease) this.current.delete(lease.workspaceId);
    this.retiring.add(lease);
    if (lease.admitted <= 0 && !this.stopping) this.retry.giveBack.schedule(() => this.giveBackRetired(), 0);
  }

  /**
   * Runs the workspace's lease statements one at a time: concurrent requests wait for the one
   * under way. When it failed because the database did not answer, those waiting fail with it
   * instead of each waiting out the database's bound in turn (a request is refused within one).
   */
  private serially<T>(workspaceId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.busy.get(workspaceId) ?? Promise.resolve(null);
    const next = previous.then((unavailable) => (unavailable ? Promise.reject(unavailable) : work()));
    const settled = next.then(
      () => null,
      (error: unknown) => (isDatabaseUnavailable(error) ? error : null),
    );
    this.busy.set(workspaceId, settled);
    void settled.then(() => {
      if (this.busy.get(workspaceId) === settled) this.busy.delete(workspaceId);
    });
    return next;
  }

  private startTimers(): void {
    if (this.heartbeat) return;
    this.heartbeat = setInterval(() => void this.keepAlive(), this.ttlMs / 4).unref();
    this.reporter = setInterval(() => void this.report(), REPORT_INTERVAL_MS).unref();
    if (this.idleMs > 0) this.idleCheck = setInterval(() => void this.returnIdle(), Math.max(this.idleMs / 2, 10)).unref();
  }

  /**
   * Pushes the leases' expiry out and reports what they hold; a lease whose row is gone
   * (swept) is retired. When the database does not answer, tried again with backoff (not
   * only at the next heartbeat), so a lease is re-confirmed as soon as it answers again.
   */
  private async keepAlive(): Promise<void> {
    if (this.retry.extend.running) return;
    this.retry.extend.running = true;
    // Retired leases with requests still in flight too: their rows must outlive those requests' settlements.
    const leases = [...this.current.values(), ...[...this.retiring].filter((lease) => lease.admitted > 0)];
    try {
      if (leases.length === 0) return this.retry.extend.succeeded();
      const held = leases.map((lease) => Math.max(lease.admitted, 0));
      const rows = await queryRows<{ id: string }>(
        this.dataSource.manager,
        `UPDATE wallet_holds h SET expires_at = now() + make_interval(secs => $2::double precision / 1000), held_millicents = v.held
           FROM unnest($1::uuid[], $3::bigint[]) AS v(id, held)
          WHERE h.id = v.id RETURNING h.id`,
        [leases.map((lease) => lease.id), this.ttlMs, held],
      );
      const alive = new Set(rows.map((row) => row.id));
      const now = Date.now();
      leases.forEach((lease, index) => {
        if (alive.has(lease.id)) {
          lease.confirmedAt = now;
          lease.reported = held[index];
        } else if (!lease.retired) {
          this.logger.warn(`Lease ${lease.id} of workspace ${lease.workspaceId} was swept; a new one is taken when needed`);
          this.retire(lease);
        }
      });
      if (this.retry.extend.failures > 0) this.logger.log(`Leases confirmed again after ${this.retry.extend.failures} failed attempt(s)`);
      this.retry.extend.succeeded();
    } catch (error) {
      if (this.retry.extend.failures === 0) this.logger.warn(`Could not extend the leases; trying again until the database answers: ${String(error)}`);
      this.retry.extend.schedule(() => this.keepAlive());
    } finally {
      this.retry.extend.running = false;
    }
  }

  /** Writes what each lease's requests hold, where it changed since the last report. */
  private async report(): Promise<void> {
    if (this.reporting) return;
    const leases = this.owned().filter((lease) => lease.admitted !== lease.reported);
    if (leases.length === 0) return;
    this.reporting = true;
    const held = leases.map((lease) => Math.max(lease.admitted, 0));
    try {
      await this.dataSource.manager.query(
        `UPDATE wallet_holds h SET held_millicents = v.held FROM unnest($1::uuid[], $2::bigint[]) AS v(id, held) WHERE h.id = v.id`,
        [leases.map((lease) => lease.id), held],
      );
      leases.forEach((lease, index) => (lease.reported = held[index]));
    } catch {
      // Tried again at the next tick; the heartbeat says when the database is away.
    } finally {
      this.reporting = false;
    }
  }

  /** The connection that listens for recalls, made once (again after it was lost, with backoff). Null when it cannot be made now. */
  private listen(): Promise<Client | null> {
    if (this.stopping) return Promise.resolve(null);
    if (this.listener) return this.listener;
    if (this.retry.listen.waiting) return Promise.resolve(null);
    const options = this.dataSource.options as PostgresDataSourceOptions;
    const client = new Client({
      connectionString: options.url,
      host: options.host,
      port: options.port,
      user: options.username,
      password: typeof options.password === 'string' ? options.password : undefined,
      database: options.database,
      application_name: 'assistant-chat-service',
      connectionTimeoutMillis: 5_000,
      keepAlive: true,
    });
    const lost = (error?: unknown) => {
      if (this.stopping || !open) return;
      open = false;
      void client.end().catch(() => undefined);
      if (this.listener === connecting) this.listener = undefined;
      if (this.retry.listen.failures === 0 && error) this.logger.warn(`Lost the connection listening for lease recalls: ${String(error)}`);
      this.retry.listen.schedule(() => (this.current.size > 0 ? this.listen().then(() => undefined) : undefined));
    };
    let open = true;
    client.on('notification', ({ channel, payload }) => this.notified(channel, payload ?? ''));
    client.on('error', lost);
    client.on('end', () => lost());
    const connecting: Promise<Client | null> = (async () => {
      try {
        await client.connect();
        await client.query(`LISTEN ${RECALL_CHANNEL}; LISTEN ${RETURNED_CHANNEL}`);
        this.retry.listen.succeeded();
        return client;
      } catch (error) {
        lost(error);
        return null;
      }
    })();
    this.listener = connecting;
    return connecting;
  }

  private notified(channel: string, payload: string): void {
    if (channel === RETURNED_CHANNEL) {
      for (const resolve of this.awaitingReturn.get(payload) ?? []) resolve();
      return;
    }
    const [workspaceId, asker] = payload.split(' ');
    if (channel !== RECALL_CHANNEL || asker === this.owner || this.stopping) return;
    if (!this.owned().some((lease) => lease.workspaceId === workspaceId)) return;
    void (async () => {
      // A request answered before its settlement committed (the journal) still holds its admission: a moment more.
      await this.pending.written(workspaceId);
      for (const lease of this.owned()) {
        if (lease.workspaceId !== workspaceId) continue;
        await this.serially(workspaceId, async () => {
          if (lease.retired) {
            if (lease.admitted <= 0 && this.retiring.has(lease)) await this.deleteRow(lease);
          } else if (lease.admitted <= 0 || lease.amount > lease.admitted) {
            await this.shrink(lease);
          }
          await this.dataSource.manager.query(`SELECT pg_notify($1, $2)`, [RETURNED_CHANNEL, lease.id]);
        }).catch((error) => this.logger.warn(`Could not give back lease ${lease.id} when recalled: ${String(error)}`));
      }
    })();
  }

  private async returnIdle(): Promise<void> {
    const now = Date.now();
    for (const lease of this.current.values()) {
      if (lease.admitted > 0 || now - lease.lastUsedAt < this.idleMs) continue;
      await this.serially(lease.workspaceId, async () => {
        // Re-checked in turn: a request may have been admitted while waiting.
        if (lease.admitted === 0 && Date.now() - lease.lastUsedAt >= this.idleMs) await this.shrink(lease);
      }).catch((error) => this.logger.warn(`Could not give back idle lease ${lease.id}: ${String(error)}`));
    }
  }
}

/** Tries a failed statement again: after RETRY_MIN_MS, doubling up to RETRY_MAX_MS while it keeps failing. */
class Backoff {
  failures = 0;
  running = false;
  private timer?: NodeJS.Timeout;

  get waiting(): boolean {
    return this.timer !== undefined;
  }

  private stopped = false;

  schedule(work: () => Promise<void> | void, delayMs?: number): void {
    if (this.timer || this.stopped) return;
    const delay = delayMs ?? Math.min(RETRY_MIN_MS * 2 ** this.failures, RETRY_MAX_MS);
    if (delayMs === undefined) this.failures++;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void work();
    }, delay).unref();
  }

  succeeded(): void {
    this.failures = 0;
  }

  /** For good: the process is stopping. */
  cancel(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
