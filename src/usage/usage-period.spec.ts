import { ApiError } from '../common/errors/api-error';
import { parseDay, resolvePeriod } from './usage-period';

describe('usage periods', () => {
  const now = new Date('2026-03-01T00:30:00Z');
  const resolve = (query: { start_date?: string; end_date?: string }, retentionDays = 90) =>
    resolvePeriod(query, { now, retentionDays });
  const refusal = (query: { start_date?: string; end_date?: string }, retentionDays = 90) => {
    try {
      resolve(query, retentionDays);
    } catch (error) {
      expect(error).toBeInstanceOf(ApiError);
      return { status: (error as ApiError).status, param: (error as ApiError).param, code: (error as ApiError).code };
    }
    throw new Error(`accepted ${JSON.stringify(query)}`);
  };

  it('accepts real calendar dates only', () => {
    expect(parseDay('2024-02-29')).toBe(Date.UTC(2024, 1, 29) / 86_400_000);
    for (const bad of ['2026-02-29', '2026-02-30', '2026-04-31', '2026-13-01', '2026-00-10', '2026-1-05', '20260105', '0050-01-01', ' 2026-01-05', '2026-01-05T00:00:00Z']) {
      expect({ bad, day: parseDay(bad) }).toEqual({ bad, day: null });
    }
  });

  it('defaults to the 30 days ending today (UTC), from the start of the first to the end of the last', () => {
    expect(resolve({})).toMatchObject({
      startDate: '2026-01-31',
      endDate: '2026-03-01',
      start: '2026-01-31T00:00:00.000Z',
      end: '2026-03-01T23:59:59.999Z',
      from: new Date('2026-01-31T00:00:00.000Z'),
      until: new Date('2026-03-02T00:00:00.000Z'),
    });
    expect(resolve({ end_date: '2026-02-10' })).toMatchObject({ startDate: '2026-01-12', endDate: '2026-02-10' });
    expect(resolve({ start_date: '2026-02-27' })).toMatchObject({ startDate: '2026-02-27', endDate: '2026-03-01' });
    // A short retention window clips the default start instead of refusing a range nobody asked for.
    expect(resolve({}, 7)).toMatchObject({ startDate: '2026-02-23', endDate: '2026-03-01' });
  });

  it('keeps ranges inside the retention window: its first day is today - (days - 1)', () => {
    expect(resolve({ start_date: '2025-12-02' })).toMatchObject({ startDate: '2025-12-02' }); // today - 89
    expect(refusal({ start_date: '2025-12-01' })).toEqual({ status: 400, param: 'start_date', code: 'outside_retention_window' });
    expect(refusal({ end_date: '2025-11-30' })).toEqual({ status: 400, param: 'end_date', code: 'outside_retention_window' });
    expect(refusal({ start_date: '2026-02-01', end_date: '2026-01-31' })).toEqual({ status: 400, param: 'end_date', code: 'invalid_date_range' });
    expect(resolve({ start_date: '2026-02-01', end_date: '2026-02-01' })).toMatchObject({ start: '2026-02-01T00:00:00.000Z', end: '2026-02-01T23:59:59.999Z' });
    // The end may lie ahead (a client east of UTC), but the range stays within the window's length.
    expect(resolve({ start_date: '2025-12-03', end_date: '2026-03-02' })).toMatchObject({ endDate: '2026-03-02' });
    expect(refusal({ start_date: '2025-12-02', end_date: '2026-03-02' })).toEqual({ status: 400, param: 'end_date', code: 'invalid_date_range' });
    expect(refusal({ start_date: '2026-02-30' })).toMatchObject({ status: 400, param: 'start_date' });
  });
});
