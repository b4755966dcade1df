/**
 * The suites that assert on time (the event loop stays responsive under a hostile request).
 * `npm test` runs them after the others, alone, on one worker: on a 2-core machine a parallel
 * suite busy on the other core would measure the machine, not the service.
 */
const base = require('./jest.config');

module.exports = {
  ...base,
  testMatch: ['<rootDir>/test/**/*.timing-spec.ts'],
  maxWorkers: 1,
};
