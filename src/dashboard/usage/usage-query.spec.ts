import { allowedPeriods, lastDays, periodDays, readRequestsQuery } from './usage-query';

const empty = { model: '', key: '', assistant: '', status: '', user: '', from: '', to: '', after: '' };

describe('usage page queries', () => {
  it('offers 7, 30 and 90 days within the retention window, 30 by default', () => {
    expect(allowedPeriods(90)).toEqual([7, 30, 90]);
    expect(allowedPeriods(45)).toEqual([7, 30]);
    expect(allowedPeriods(3)).toEqual([3]);
    expect(periodDays('7', 90)).toBe(7);
    expect(periodDays('8', 90)).toBe(30);
    expect(periodDays(undefined, 90)).toBe(30);
    expect(periodDays('90', 45)).toBe(30);
  });

  it('counts the last days with today (UTC) included', () => {
    expect(lastDays(7, new Date('2026-03-05T23:59:00Z'))).toEqual({ start_date: '2026-02-27', end_date: '2026-03-05' });
  });

  it('reads the filters of the requests page, days as UTC with the last one included', () => {
    const read = readRequestsQuery({
      ...empty,
      model: 'gpt-4o',
      key: '5b2f0c1e-7a3d-4e8f-9b10-2c3d4e5f6a7b',
      assistant: '3f1e8a52-9c1d-4b7e-8f00-1d2c3b4a5f60',
      status: 'error',
      user: 'u, 1',
      from: '2026-03-01',
      to: '2026-03-01',
    });
    expect(read).toEqual({
      ok: true,
      filter: {
        model: 'gpt-4o',
        apiKeyId: '5b2f0c1e-7a3d-4e8f-9b10-2c3d4e5f6a7b',
        assistantId: '3f1e8a52-9c1d-4b7e-8f00-1d2c3b4a5f60',
        status: 'error',
        userId: 'u, 1',
        from: new Date('2026-03-01T00:00:00Z'),
        until: new Date('2026-03-02T00:00:00Z'),
      },
      startingAfter: undefined,
    });
  });

  it('names each bad filter', () => {
    const read = readRequestsQuery({ ...empty, key: 'sk-abc', assistant: 'demo', status: 'ok', from: '2026-13-01', after: '1' });
    expect(read.ok ? [] : Object.keys(read.errors).sort()).toEqual(['after', 'assistant', 'from', 'key', 'status']);
  });
});
