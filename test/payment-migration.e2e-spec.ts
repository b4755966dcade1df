import { DataSource } from 'typeorm';
import { ProviderNeutralPayments1764001200000 } from '../migrations/1764001200000-ProviderNeutralPayments';
import { dataSourceOptions } from '../src/database/data-source';
import { createTestDatabase } from './support/test-database';

/** The migration that took provider names out of the schema, both ways. */
describe('migration ProviderNeutralPayments', () => {
  let db: DataSource;
  beforeAll(async () => {
    db = new DataSource({ ...dataSourceOptions(await createTestDatabase()), logging: false });
    await db.initialize();
  });
  afterAll(() => db?.destroy());

  const referenceColumns = async (): Promise<string[]> =>
    (
      await db.query(
        `SELECT column_name FROM information_schema.columns
          WHERE table_name = 'auto_topup_settings' AND column_name ~ '^(payment|stripe)_' ORDER BY column_name`,
      )
    ).map((row: { column_name: string }) => row.column_name);
  const nameChecks = async (): Promise<string[]> =>
    (
      await db.query(
        `SELECT conname FROM pg_constraint
          WHERE conname IN ('auto_topup_attempts_provider_check', 'workspaces_custom_rate_enterprise_only') ORDER BY conname`,
      )
    ).map((row: { conname: string }) => row.conname);

  it('names the payment references neutrally and lists no provider or tier name in a constraint; down restores both', async () => {
    expect(await referenceColumns()).toEqual(['payment_customer_ref', 'payment_method_ref']);
    expect(await nameChecks()).toEqual([]);

    const runner = db.createQueryRunner();
    try {
      const migration = new ProviderNeutralPayments1764001200000();
      await migration.down(runner);
      expect(await referenceColumns()).toEqual(['stripe_customer_id', 'stripe_payment_method_id']);
      expect(await nameChecks()).toEqual(['auto_topup_attempts_provider_check', 'workspaces_custom_rate_enterprise_only']);
      await migration.up(runner);
    } finally {
      await runner.release();
    }
    expect(await referenceColumns()).toEqual(['payment_customer_ref', 'payment_method_ref']);
    expect(await nameChecks()).toEqual([]);
  });
});
