import { dollarsField, parseDollars } from '../../common/dollars';
import { readLedgerQuery } from './billing-form';

describe('billing form fields', () => {
  it('reads dollars as exact millicents, whole cents only', () => {
    expect(parseDollars('25')).toBe(2_500_000);
    expect(parseDollars('25.5')).toBe(2_550_000);
    expect(parseDollars(' $1,250.05 ')).toBe(125_005_000);
    expect(parseDollars('0.01')).toBe(1_000);
    for (const bad of ['', 'abc', '1.005', '-5', '1e3', '12,34', '99999999999', undefined]) expect(parseDollars(bad)).toBeNull();
  });

  it('writes millicents back as a dollars field', () => {
    expect(dollarsField(2_550_000)).toBe('25.50');
    expect(dollarsField(1_000)).toBe('0.01');
    expect(dollarsField(null)).toBe('');
  });

  it('reads the ledger filter, days as UTC and the last one included', () => {
    const read = readLedgerQuery({ type: 'topup', from: '2026-03-01', to: '2026-03-02', after: '' });
    expect(read).toEqual({
      ok: true,
      filter: { type: 'topup', from: new Date('2026-03-01T00:00:00Z'), until: new Date('2026-03-03T00:00:00Z') },
      startingAfter: undefined,
    });
  });

  it('names every bad filter field', () => {
    const read = readLedgerQuery({ type: 'gift', from: '2026-02-30', to: 'soon', after: 'x' });
    expect(read.ok).toBe(false);
    expect(Object.keys(read.ok ? {} : read.errors).sort()).toEqual(['after', 'from', 'to', 'type']);
    const backwards = readLedgerQuery({ type: '', from: '2026-03-02', to: '2026-03-01', after: '' });
    expect(backwards).toEqual({ ok: false, errors: { to: 'The last day is before the first day.' } });
  });
});
