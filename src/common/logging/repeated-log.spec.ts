import { errorKind, RepeatedLog } from './repeated-log';

describe('RepeatedLog', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  function capture() {
    const lines: string[] = [];
    return { lines, log: new RepeatedLog((line) => lines.push(line), 10_000) };
  }

  it('writes 1,500 identical errors in 9 s as one line, then one line with their count at the end of the interval', () => {
    const { lines, log } = capture();
    for (let i = 0; i < 1_500; i++) {
      log.report('journal:ENOSPC', `Could not journal the settlement of request r${i}: ENOSPC`);
      jest.advanceTimersByTime(6);
    }
    expect(lines).toEqual(['Could not journal the settlement of request r0: ENOSPC']);
    jest.advanceTimersByTime(10_000 - 9_000);
    expect(lines).toEqual([
      'Could not journal the settlement of request r0: ENOSPC',
      'Could not journal the settlement of request r1499: ENOSPC (x 1,499 in the last 10 s)',
    ]);
  });

  it('keeps counting while the error goes on, and forgets a kind quiet for a whole interval', () => {
    const { lines, log } = capture();
    log.report('db', 'down 1');
    jest.advanceTimersByTime(5_000);
    log.report('db', 'down 2');
    jest.advanceTimersByTime(5_000);
    expect(lines).toEqual(['down 1', 'down 2 (x 1 in the last 10 s)']);
    log.report('db', 'down 3');
    log.report('db', 'down 4');
    jest.advanceTimersByTime(10_000);
    expect(lines.slice(2)).toEqual(['down 4 (x 2 in the last 10 s)']);
    // A whole quiet interval: nothing written, and the kind is forgotten.
    jest.advanceTimersByTime(10_000);
    expect(lines).toHaveLength(3);
    log.report('db', 'down 5');
    expect(lines.slice(3)).toEqual(['down 5']);
  });

  it('counts each kind on its own', () => {
    const { lines, log } = capture();
    log.report('a', 'A');
    log.report('b', 'B');
    log.report('a', 'A again');
    expect(lines).toEqual(['A', 'B']);
    jest.advanceTimersByTime(10_000);
    expect(lines).toEqual(['A', 'B', 'A again (x 1 in the last 10 s)']);
  });

  it('writes the counts not yet written when flushed', () => {
    const { lines, log } = capture();
    log.report('a', 'A');
    log.report('a', 'A');
    log.flush();
    expect(lines).toEqual(['A', 'A (x 1 in the last 10 s)']);
    jest.advanceTimersByTime(20_000);
    expect(lines).toHaveLength(2);
  });
});

describe('errorKind', () => {
  it('is the error code, looked for in the driver error TypeORM wraps', () => {
    expect(errorKind(Object.assign(new Error('no space left on device, write'), { code: 'ENOSPC' }))).toBe('ENOSPC');
    expect(errorKind({ message: 'x', driverError: { code: '57P01' } })).toBe('57P01');
  });

  it('without a code, is the message with numbers and ids masked', () => {
    const a = errorKind(new Error('Connection terminated: PostgreSQL did not answer within 6000 ms (request 3f2a9c1e-0b7d-4c55-9e1a-2b3c4d5e6f70)'));
    const b = errorKind(new Error('Connection terminated: PostgreSQL did not answer within 6000 ms (request 00000000-1111-2222-3333-444444444444)'));
    expect(a).toBe(b);
    expect(errorKind(new Error('other'))).not.toBe(a);
  });
});
