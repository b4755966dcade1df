/**
 * How the dashboard writes amounts and times. Money is kept in millicents (1 dollar =
 * 100,000 millicents) and shown exactly to the millicent, never through a float division.
 */

const MILLICENTS_PER_DOLLAR = 100_000n;

/**
 * Millicents as dollars: `$10.00`, `$1,234.50`, `$0.00123`. At least two decimals,
 * more only when a whole number of cents would hide millicents (up to five). A fraction of a
 * millicent (costs are exact to 1e-6 millicent) is rounded half away from zero. Accepts a
 * number, a bigint, or a decimal string as PostgreSQL returns numerics.
 */
export function formatMillicents(value: number | bigint | string): string {
  const millicents = toWholeMillicents(value);
  const negative = millicents < 0n;
  const magnitude = negative ? -millicents : millicents;
  const dollars = magnitude / MILLICENTS_PER_DOLLAR;
  const fraction = (magnitude % MILLICENTS_PER_DOLLAR).toString().padStart(5, '0').replace(/0{1,3}$/, '');
  const decimals = fraction.length < 2 ? fraction.padEnd(2, '0') : fraction;
  const grouped = dollars.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return `${negative ? '-' : ''}$${grouped}.${decimals}`;
}

function toWholeMillicents(value: number | bigint | string): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new RangeError(`Not an amount: ${value}`);
    if (Number.isSafeInteger(value)) return BigInt(value);
    // Half away from zero, as for strings.
    return BigInt(Math.sign(value) * Math.round(Math.abs(value)));
  }
  const match = /^\s*(-?)(\d+)(?:\.(\d*))?\s*$/.exec(value);
  if (!match) throw new RangeError(`Not an amount: ${JSON.stringify(value)}`);
  const [, sign, whole, fraction = ''] = match;
  let magnitude = BigInt(whole);
  if (fraction.length > 0 && fraction[0] >= '5') magnitude += 1n;
  return sign === '-' ? -magnitude : magnitude;
}

/** `2025-03-14` (UTC). */
export function formatDate(date: Date): string {
  return date.toISOString().slice(0, 10);
}

/** `2025-03-14 09:26 UTC`: minutes are as fine as the dashboard's times get. */
export function formatDateTime(date: Date): string {
  return `${date.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}
