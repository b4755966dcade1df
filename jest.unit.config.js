/**
 * Unit specs, beside the code (src/**\/*.spec.ts): plain fakes, no database, no network, no
 * global setup; seconds in all. `npm run test:unit`. A spec that needs PostgreSQL or a running
 * app is an integration test: it belongs in test/ as a *.e2e-spec.ts.
 */
module.exports = {
  displayName: 'unit',
  rootDir: '.',
  testEnvironment: 'node',
  testMatch: ['<rootDir>/src/**/*.spec.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json' }] },
  moduleFileExtensions: ['ts', 'js', 'json'],
};
