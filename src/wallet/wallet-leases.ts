import { BeforeApplicationShutdown, Injectable, Logger } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
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

/** A budget this process has reserved from a wallet, and what it has admitted from it. */
export interface Lease {
  /** The lease's row in wallet_holds. */
  readonly id: string;
  readonly workspaceId: string;
  /** What the row sets aside (in `reserved`), as this process knows it. */
  amount: number;
  /** What requests in flight were admitted with. */
  admitted: number;
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
 * hold of its own (WalletService.reserve), after this process's spare is given back.
 */
@Injectable()
export class WalletLeases implements BeforeApplicationShutdown {
  private readonly logger = new Logger('WalletLeases');
  private readonly current = new Map<string, Lease>();
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
  private stopping = false;

  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @InjectConfig() config: AppConfig,
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
    if (this.idleMs > 0 || lease.admitted > 0) return;
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
    const deadline = Date.now() + SHUTDOWN_WAIT_MS;
    while ([...this.current.values()].some((lease) => lease.admitted > 0) && Date.now() < deadline) await sleep(20);
    for (const lease of this.current.values()) {
      await this.serially(lease.workspaceId, () => this.shrink(lease)).catch((error) =>
        this.logger.warn(`Could not give back lease ${lease.id}; the sweeper frees it at its expiry: ${String(error)}`),
      );
    }
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
    this.current.set(workspaceId, { id, workspaceId, amount: Number(rows[0].granted), admitted: 0, lastUsedAt: now, confirmedAt: now, retired: false });
    this.startTimers();
    return true;
  }

  /**
   * Gives back the lease's spare: all of it, row included, when nothing is admitted. The row
   * is locked before the wallet (the sweeper's order), and only what the row still had is
   * given back, so `reserved` stays the sum of holds and leases whatever this process believed.
   */
  private async shrink(lease: Lease): Promise<void> {
    const manager = this.dataSource.manager;
    if (lease.admitted <= 0) {
      this.retire(lease);
      await manager.query(
        `WITH returned AS (DELETE FROM wallet_holds WHERE id = $1 RETURNING workspace_id, amount_millicents)
         UPDATE wallets w SET reserved_millicents = w.reserved_millicents - r.amount_millicents, updated_at = now()
           FROM returned r WHERE w.workspace_id = r.workspace_id`,
        [lease.id],
      );
      lease.amount = 0;
      return;
    }
    const spare = lease.amount - lease.admitted;
    if (spare <= 0) return;
    // Taken out first, so that no request is admitted from money on its way back.
    lease.amount -= spare;
    const rows = await queryRows<{ id: string }>(
      manager,
      `WITH returned AS (
         UPDATE wallet_holds SET amount_millicents = amount_millicents - $2 WHERE id = $1 AND amount_millicents >= $2
         RETURNING workspace_id)
       UPDATE wallets w SET reserved_millicents = w.reserved_millicents - $2, updated_at = now()
         FROM returned r WHERE w.workspace_id = r.workspace_id
       RETURNING w.workspace_id AS id`,
      [lease.id, spare],
    );
    if (rows.length === 0) lease.amount += spare;
  }

  private retire(lease: Lease): void {
    lease.retired = true;
    if (this.current.get(lease.workspaceId) === lease) this.current.delete(lease.workspaceId);
  }

  /** Runs the workspace's lease statements one at a time: concurrent requests wait for the one under way. */
  private serially<T>(workspaceId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.busy.get(workspaceId) ?? Promise.resolve();
    const next = previous.then(work, work);
    const settled = next.catch(() => undefined);
    this.busy.set(workspaceId, settled);
    void settled.then(() => {
      if (this.busy.get(workspaceId) === settled) this.busy.delete(workspaceId);
    });
    return next;
  }

  private startTimers(): void {
    if (this.heartbeat) return;
    this.heartbeat = setInterval(() => void this.keepAlive(), this.ttlMs / 4).unref();
    if (this.idleMs > 0) this.idleCheck = setInterval(() => void this.returnIdle(), Math.max(this.idleMs / 2, 10)).unref();
  }

  /** Pushes the leases' expiry out; a lease whose row is gone (swept) is retired. */
  private async keepAlive(): Promise<void> {
    const leases = [...this.current.values()];
    if (leases.length === 0) return;
    try {
      const rows = await queryRows<{ id: string }>(
        this.dataSource.manager,
        `UPDATE wallet_holds SET expires_at = now() + make_interval(secs => $2::double precision / 1000)
          WHERE id = ANY($1::uuid[]) RETURNING id`,
        [leases.map((lease) => lease.id), this.ttlMs],
      );
      const alive = new Set(rows.map((row) => row.id));
      const now = Date.now();
      for (const lease of leases) {
        if (alive.has(lease.id)) lease.confirmedAt = now;
        else {
          this.logger.warn(`Lease ${lease.id} of workspace ${lease.workspaceId} was swept; a new one is taken when needed`);
          this.retire(lease);
        }
      }
    } catch (error) {
      this.logger.warn(`Could not extend the leases: ${String(error)}`);
    }
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
