import { windowAt } from './windows';

describe('nerfing windows', () => {
  const at = Date.parse('2026-02-14T10:37:21.500Z');

  it('are the calendar minute, hour and UTC day that contain the moment', () => {
    expect(windowAt('minute', at)).toEqual({ start: Date.parse('2026-02-14T10:37:00Z'), end: Date.parse('2026-02-14T10:38:00Z') });
    expect(windowAt('hour', at)).toEqual({ start: Date.parse('2026-02-14T10:00:00Z'), end: Date.parse('2026-02-14T11:00:00Z') });
    expect(windowAt('day', at)).toEqual({ start: Date.parse('2026-02-14T00:00:00Z'), end: Date.parse('2026-02-15T00:00:00Z') });
  });

  it('is the whole UTC month, of whatever length, for a month', () => {
    expect(windowAt('month', at)).toEqual({ start: Date.parse('2026-02-01T00:00:00Z'), end: Date.parse('2026-03-01T00:00:00Z') });
    expect(windowAt('month', Date.parse('2026-12-31T23:59:59.999Z'))).toEqual({
      start: Date.parse('2026-12-01T00:00:00Z'),
      end: Date.parse('2027-01-01T00:00:00Z'),
    });
  });

  it('starts the next window at the end of the last one', () => {
    const minute = windowAt('minute', at);
    expect(windowAt('minute', minute.end)).toEqual({ start: minute.end, end: minute.end + 60_000 });
    expect(windowAt('minute', minute.end - 1)).toEqual(minute);
  });
});
