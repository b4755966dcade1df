import { Injectable, Logger } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { MetricsService } from '../metrics/metrics.service';
import { WalletLeases } from './wallet-leases';

/**
 * The wallet's gauges, read when Prometheus scrapes: money set aside and holds in the whole
 * database (every replica reports the same values: take `max` across them), and this
 * process's leases. A scrape while the database is down keeps the last values.
 */
@Injectable()
export class WalletMetrics {
  private readonly logger = new Logger('Metrics');

  constructor(metrics: MetricsService, @InjectDataSource() dataSource: DataSource, leases: WalletLeases) {
    metrics.gauge('acs_wallet_holds', 'Holds and leases setting money aside, in the whole database, by kind (request, lease)', ['kind'], async (gauge) => {
      const rows = await this.read<{ kind: string; count: number }>(dataSource, `SELECT kind, count(*)::int AS count FROM wallet_holds GROUP BY kind`);
      if (!rows) return;
      gauge.reset();
      for (const kind of ['request', 'lease']) gauge.set({ kind }, rows.find((row) => row.kind === kind)?.count ?? 0);
    });
    metrics.gauge('acs_wallet_reserved_millicents', 'Money set aside by holds and leases in all wallets (the whole database), in millicents', [], async (gauge) => {
      const rows = await this.read<{ reserved: string }>(dataSource, `SELECT coalesce(sum(reserved_millicents), 0)::text AS reserved FROM wallets`);
      if (rows) gauge.set(Number(rows[0].reserved));
    });
    metrics.gauge('acs_wallet_leases', "This process's budget leases", [], (gauge) => gauge.set(leases.inUse().leases));
    metrics.gauge(
      'acs_wallet_leased_millicents',
      "Money in this process's leases, by state (leased: set aside; admitted: what requests in flight were admitted with)",
      ['state'],
      (gauge) => {
        const { amount, admitted } = leases.inUse();
        gauge.set({ state: 'leased' }, amount);
        gauge.set({ state: 'admitted' }, admitted);
      },
    );
  }

  private async read<T>(dataSource: DataSource, sql: string): Promise<T[] | null> {
    try {
      return (await dataSource.query(sql)) as T[];
    } catch (error) {
      this.logger.warn(`Wallet gauges not updated: ${String(error)}`);
      return null;
    }
  }
}
