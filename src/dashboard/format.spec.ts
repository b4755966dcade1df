import { formatDate, formatDateTime, formatMillicents } from './format';

describe('formatMillicents', () => {
  it.each([
    [0, '$0.00'],
    [100_000, '$1.00'],
    [1_000_000, '$10.00'],
    [150_000, '$1.50'],
    [1_000, '$0.01'],
    [1, '$0.00001'],
    [123, '$0.00123'],
    [100_010, '$1.0001'],
    [99_999, '$0.99999'],
    [123_456_789_000, '$1,234,567.89'],
    [-50_000, '-$0.50'],
    [Number.MAX_SAFE_INTEGER, '$90,071,992,547.40991'],
  ])('%p millicents is %s', (millicents, text) => {
    expect(formatMillicents(millicents)).toBe(text);
  });

  it('is exact for bigints beyond the safe integers', () => {
    expect(formatMillicents(12_345_678_901_234_567_890n)).toBe('$123,456,789,012,345.6789');
  });

  it('reads PostgreSQL numerics and rounds a fraction of a millicent half away from zero', () => {
    expect(formatMillicents('1234.500000')).toBe('$0.01235');
    expect(formatMillicents('1234.499999')).toBe('$0.01234');
    expect(formatMillicents('-1234.5')).toBe('-$0.01235');
    expect(formatMillicents('100000')).toBe('$1.00');
    expect(formatMillicents(0.4)).toBe('$0.00');
    expect(formatMillicents(2.5)).toBe('$0.00003');
    expect(formatMillicents(-2.5)).toBe('-$0.00003');
  });

  it('refuses what is not an amount', () => {
    expect(() => formatMillicents(Number.NaN)).toThrow(RangeError);
    expect(() => formatMillicents(Infinity)).toThrow(RangeError);
    expect(() => formatMillicents('1e5')).toThrow(RangeError);
    expect(() => formatMillicents('')).toThrow(RangeError);
  });
});

describe('dates', () => {
  const instant = new Date('2025-03-14T09:26:53.589Z');
  it('writes days and minutes in UTC', () => {
    expect(formatDate(instant)).toBe('2025-03-14');
    expect(formatDateTime(instant)).toBe('2025-03-14 09:26 UTC');
  });
});
