import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import { PartitionedUsageRecords1764003700000 } from '../migrations/1764003700000-PartitionedUsageRecords';
import { MessagesUsageSource1764004000000 } from '../migrations/1764004000000-MessagesUsageSource';
import { EmbeddingsUsageSource1764004100000 } from '../migrations/1764004100000-EmbeddingsUsageSource';
import { Billing } from '../src/billing/billing';
import { UsageRetention } from '../src/usage/usage-retention';
import { startTestApp, TestApp } from './support/test-app';

const DAY_MS = 86_400_000;
const SEEDED_DAYS = 6;
const SEEDED_PER_DAY = 400;

/**
 * The migration that partitions usage_records, run on a live table: the database holds
 * records of several days in one table (the migration's `down` puts it back that way), and the
 * service answers chat requests and writes their settlements while it runs.
 */
describe('migration PartitionedUsageRecords on a live table', () => {
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    t = await startTestApp({ config: { usageRetentionDays: 3 } });
    db = t.app.get(DataSource);
  });
  afterAll(() => t.close());

  const relkind = async (): Promise<string> =>
    ((await db.query(`SELECT relkind FROM pg_class WHERE oid = 'usage_records'::regclass`)) as { relkind: string }[])[0].relkind;

  /** Every daily total of the workspace beside the sums of its records: equal when exact. */
  async function totalsAndSums(workspaceId: string): Promise<{ totals: unknown[]; sums: unknown[] }> {
    const totals = (await db.query(
      `SELECT day::text, model, sum(requests)::int AS requests, sum(tokens)::int AS tokens, sum(cost_millicents)::text AS cost
         FROM usage_daily_totals WHERE workspace_id = $1 GROUP BY 1, 2 ORDER BY 1, 2`,
      [workspaceId],
    )) as unknown[];
    const sums = (await db.query(
      `SELECT ((created_at AT TIME ZONE 'UTC')::date)::text AS day, model, count(*)::int AS requests, sum(total_tokens)::int AS tokens,
              sum(total_cost_millicents)::text AS cost
         FROM usage_records WHERE workspace_id = $1 GROUP BY 1, 2 ORDER BY 1, 2`,
      [workspaceId],
    )) as unknown[];
    return { totals, sums };
  }

  it('keeps every record and fails no settlement while converting a table of several days under load', async () => {
    const migration = new PartitionedUsageRecords1764003700000();
    const runner = db.createQueryRunner();
    try {
      // The later migrations that change usage_records are undone first, as `migration:revert` would.
      const messagesSource = new MessagesUsageSource1764004000000();
      const embeddingsSource = new EmbeddingsUsageSource1764004100000();
      await embeddingsSource.down(runner);
      await messagesSource.down(runner);
      await migration.down(runner);
      expect(await relkind()).toBe('r');

      const workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 50_000_000 });
      await db.query(
        `INSERT INTO usage_records (workspace_id, request_id, model, status, total_tokens, total_cost_millicents, llm_cost_millicents, created_at)
         SELECT $1, 'seed_' || g, 'gpt-4o-mini', 'success', 12, 2.5, 2.5, now() - (g % $2) * interval '1 day' - (g % 1000) * interval '1 second'
           FROM generate_series(1, $3::int) AS g`,
        [workspace.id, SEEDED_DAYS, SEEDED_DAYS * SEEDED_PER_DAY],
      );
      const seeded = ((await db.query(`SELECT id FROM usage_records WHERE workspace_id = $1 ORDER BY id`, [workspace.id])) as { id: string }[]).map(
        (row) => row.id,
      );
      expect(seeded).toHaveLength(SEEDED_DAYS * SEEDED_PER_DAY);
      const billing = t.app.get(Billing);
      const incidentsBefore = { ...billing.incidents };

      // Four clients asking without a pause, from before the migration starts to after it ends.
      let stop = false;
      const answered: string[] = [];
      const failures: unknown[] = [];
      const clients = [1, 2, 3, 4].map(async () => {
        while (!stop) {
          try {
            const answer = await workspace.client.chat.completions.create({
              model: 'gpt-4o-mini',
              max_tokens: 20,
              messages: [{ role: 'user', content: 'Hello!' }],
            });
            answered.push(answer.id);
          } catch (error) {
            failures.push(error);
          }
        }
      });
      // Until some answers came and failures did not stop everything (a loaded machine is slow to answer).
      const answers = async (count: number) => {
        while (answered.length < count && failures.length === 0) await sleep(20);
      };
      await answers(8);
      const during = answered.length;
      await migration.up(runner);
      await messagesSource.up(runner);
      await embeddingsSource.up(runner);
      const after = answered.length;
      await answers(after + 8);
      stop = true;
      await Promise.all(clients);
      await t.settled(workspace.id);
      await billing.settlements.idle();

      expect(failures).toEqual([]);
      expect(during).toBeGreaterThan(0);
      expect(answered.length).toBeGreaterThan(after);
      expect(billing.incidents).toEqual(incidentsBefore);
      expect(await relkind()).toBe('p');
      const partitions = ((await db.query(
        `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'usage_records'::regclass ORDER BY 1`,
      )) as { name: string }[]).map((row) => row.name);
      expect(partitions[0]).toBe('usage_records_legacy');
      expect(partitions.length).toBeGreaterThan(5);

      // Every record kept, and one record per answer, each charged once in the ledger.
      const kept = ((await db.query(`SELECT id FROM usage_records WHERE workspace_id = $1 AND request_id LIKE 'seed\\_%' ORDER BY id`, [
        workspace.id,
      ])) as { id: string }[]).map((row) => row.id);
      expect(kept).toEqual(seeded);
      const [load] = (await db.query(
        `SELECT count(*)::int AS records, count(*) FILTER (WHERE charged_millicents > 0)::int AS charged, sum(charged_millicents)::int AS sum
           FROM usage_records WHERE workspace_id = $1 AND request_id NOT LIKE 'seed\\_%'`,
        [workspace.id],
      )) as { records: number; charged: number; sum: number }[];
      expect(load.records).toBe(answered.length);
      const [ledger] = (await db.query(
        `SELECT count(*)::int AS rows, -sum(amount_millicents)::int AS sum FROM wallet_transactions WHERE workspace_id = $1 AND type = 'usage'`,
        [workspace.id],
      )) as { rows: number; sum: number }[];
      expect(ledger).toEqual({ rows: load.charged, sum: load.sum });
      const exact = await totalsAndSums(workspace.id);
      expect(exact.totals).toEqual(exact.sums);

      // Retention on the converted table: its expired rows are deleted in batches (it spans the cutoff), the rest kept.
      const retention = t.app.get(UsageRetention);
      const cutoff = retention.cutoff(new Date());
      const [expired] = (await db.query(`SELECT count(*)::int AS n FROM usage_records WHERE workspace_id = $1 AND created_at < $2`, [
        workspace.id,
        cutoff,
      ])) as { n: number }[];
      expect(expired.n).toBeGreaterThan(0);
      const purge = await retention.purgeExpired({ batchSize: 500 });
      expect(purge).toMatchObject({ deleted: expired.n, droppedPartitions: [], ran: true });
      const [left] = (await db.query(`SELECT count(*)::int AS n, min(created_at) AS oldest FROM usage_records WHERE workspace_id = $1`, [
        workspace.id,
      ])) as { n: number; oldest: Date }[];
      expect(left.n).toBe(seeded.length + answered.length - expired.n);
      expect(left.oldest.getTime()).toBeGreaterThanOrEqual(cutoff.getTime());
      const trimmed = await totalsAndSums(workspace.id);
      expect(trimmed.totals).toEqual(trimmed.sums);

      // Once all of it is out of the window, the converted table is dropped whole, like a day.
      const later = await retention.purgeExpired({ now: new Date(Date.now() + 5 * DAY_MS) });
      expect(later.droppedPartitions[0]).toBe('usage_records_legacy');
    } finally {
      await runner.release();
    }
  });
});
