/**
 * Unit specs live beside the code (src/**\/*.spec.ts); integration and end-to-end suites in test/.
 * Suites that assert on time (`*.timing-spec.ts`) run apart, alone: jest.timing.config.js.
 */
module.exports = {
  rootDir: '.',
  testEnvironment: 'node',
  testMatch: ['<rootDir>/src/**/*.spec.ts', '<rootDir>/test/**/*.e2e-spec.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }] },
  moduleFileExtensions: ['ts', 'js', 'json'],
  // One embedded PostgreSQL for the run; each test file clones the migrated template database.
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 30_000,
  maxWorkers: 2,
};
