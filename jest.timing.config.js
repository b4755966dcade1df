/**
 * The suites that assert on time (the event loop stays responsive under a hostile request).
 * `npm run test:e2e` runs them after the others, alone, on one worker: on a 2-core machine a
 * parallel suite busy on the other core would measure the machine, not the service.
 */
const e2e = require('./jest.e2e.config');

module.exports = {
  ...e2e,
  displayName: 'timing',
  testMatch: ['<rootDir>/test/**/*.timing-spec.ts'],
  maxWorkers: 1,
};
