/**
 * Integration and end-to-end suites (test/**\/*.e2e-spec.ts), with the unit specs' TypeScript
 * setup: one embedded PostgreSQL for the run, each test file cloning the migrated template
 * database. `npm run test:e2e` (the suites that spawn the CLI or the server need `npm run build`).
 */
const unit = require('./jest.unit.config');

module.exports = {
  ...unit,
  displayName: 'e2e',
  testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 30_000,
  maxWorkers: 2,
};
