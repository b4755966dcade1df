import type { DataSource } from 'typeorm';
import { DatabaseProbe, READINESS_WAIT_MS } from './database-probe';

/** A database that accepts the connection and answers nothing (frozen): pg's connect() never settles. */
const connections: unknown[] = [];
jest.mock('pg', () => ({
  Client: class {
    connection = { stream: { destroy: () => undefined } };
    constructor() {
      connections.push(this);
    }
    on(): void {}
    connect(): Promise<void> {
      return new Promise(() => undefined);
    }
  },
}));

/**
 * The readiness probe's own bound, on the clock it is written against: the timing of
 * /health/ready under a real frozen PostgreSQL is database-freeze.e2e-spec.ts's, whose
 * wall-clock measure also counts the machine's stalls.
 */
describe('DatabaseProbe', () => {
  beforeEach(() => {
    jest.useFakeTimers();
    connections.length = 0;
  });
  afterEach(() => jest.useRealTimers());

  it('says "down" READINESS_WAIT_MS after it was asked when the database answers nothing, and callers meanwhile share one probe', async () => {
    const probe = new DatabaseProbe({ options: { url: 'postgres://frozen' } } as unknown as DataSource);
    const answers: Array<boolean | 'waiting'> = ['waiting', 'waiting'];
    void probe.answers().then((up) => (answers[0] = up));
    await jest.advanceTimersByTimeAsync(250);
    void probe.answers().then((up) => (answers[1] = up));

    await jest.advanceTimersByTimeAsync(READINESS_WAIT_MS - 251);
    expect(answers).toEqual(['waiting', 'waiting']);
    await jest.advanceTimersByTimeAsync(1);
    expect(answers).toEqual([false, 'waiting']);
    await jest.advanceTimersByTimeAsync(250);
    expect(answers).toEqual([false, false]);
    expect(connections).toHaveLength(1);
    probe.onApplicationShutdown();
  });
});
