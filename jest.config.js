/**
 * Both layers as two projects, for `npx jest <path>` while working: the unit specs beside the
 * code (jest.unit.config.js) and the suites in test/ (jest.e2e.config.js). PostgreSQL starts
 * only when an e2e file is among those run: a project's global setup runs for its own tests
 * alone. Suites that assert on time (`*.timing-spec.ts`) run apart, alone: jest.timing.config.js.
 */
const unit = require('./jest.unit.config');
// Options of the whole run: jest refuses them inside a project.
const { testTimeout, maxWorkers, ...e2e } = require('./jest.e2e.config');

module.exports = {
  projects: [unit, e2e],
  testTimeout,
  maxWorkers,
};
