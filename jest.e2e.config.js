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
  // A worker that ends a file above this is replaced: the suites run the app in the worker's own
  // process, and a heap grown over many files makes a full collection long enough to stall the
  // timing bounds of the next file (a /health/ready probe at 1.2 s in database-freeze).
  workerIdleMemoryLimit: '1GB',
};
