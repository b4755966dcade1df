/** Dollars as people type them: `25`, `25.5`, `1,250.00`, `$10`. */
const DOLLARS = /^\$?\s*(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?$/;
/** The largest amount a field takes, so that the millicents stay a safe integer. */
const MAX_DOLLARS = 10_000_000_000n;

/**
 * An amount typed in dollars, as millicents (1 dollar = 100,000), exactly: whole cents only.
 * Null when it is not such an amount.
 */
export function parseDollars(input: string | undefined): number | null {
  const match = DOLLARS.exec((input ?? '').trim());
  if (!match) return null;
  const whole = BigInt(match[1].replace(/,/g, ''));
  if (whole > MAX_DOLLARS) return null;
  const cents = BigInt((match[2] ?? '').padEnd(2, '0'));
  return Number(whole * 100_000n + cents * 1_000n);
}

/** Millicents as a value for a dollars field (`25.00`); whole cents, as the fields take. */
export function dollarsField(millicents: number | null | undefined): string {
  if (millicents === null || millicents === undefined) return '';
  const cents = BigInt(Math.round(millicents / 1000));
  return `${cents / 100n}.${(cents % 100n).toString().padStart(2, '0')}`;
}

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
