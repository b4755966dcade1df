import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The payment seam names no provider: the saved customer and payment method are references
 * only the provider reads, and which providers exist is checked by the app
 * (PAYMENT_PROVIDER_NAMES), so adding one needs no migration. Likewise a custom rate limit is
 * allowed by the tier policy (`customRateAllowed`), not by a tier name in a constraint.
 * `down` restores the columns' names and both constraints.
 */
export class ProviderNeutralPayments1764001200000 implements MigrationInterface {
  name = 'ProviderNeutralPayments1764001200000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE auto_topup_settings RENAME COLUMN stripe_customer_id TO payment_customer_ref`);
    await queryRunner.query(`ALTER TABLE auto_topup_settings RENAME COLUMN stripe_payment_method_id TO payment_method_ref`);
    await queryRunner.query(`ALTER TABLE auto_topup_attempts DROP CONSTRAINT auto_topup_attempts_provider_check`);
    await queryRunner.query(`ALTER TABLE workspaces DROP CONSTRAINT workspaces_custom_rate_enterprise_only`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE workspaces ADD CONSTRAINT workspaces_custom_rate_enterprise_only
         CHECK (custom_rate_limit_rpm IS NULL OR tier = 'enterprise')`,
    );
    await queryRunner.query(
      `ALTER TABLE auto_topup_attempts ADD CONSTRAINT auto_topup_attempts_provider_check
         CHECK (provider IN ('stripe', 'simulated'))`,
    );
    await queryRunner.query(`ALTER TABLE auto_topup_settings RENAME COLUMN payment_method_ref TO stripe_payment_method_id`);
    await queryRunner.query(`ALTER TABLE auto_topup_settings RENAME COLUMN payment_customer_ref TO stripe_customer_id`);
  }
}
