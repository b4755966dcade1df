import { ValueTransformer } from 'typeorm';

/**
 * `bigint` columns (money, in millicents) come back from `pg` as strings. Amounts are
 * handled as JS numbers, so anything outside the safe-integer range is refused loudly
 * rather than silently rounded.
 */
export const bigintToNumber: ValueTransformer = {
  to: (value: number | null | undefined) => value,
  from: (value: string | null): number | null => {
    if (value === null || value === undefined) return null;
    const parsed = Number(value);
    if (!Number.isSafeInteger(parsed)) throw new Error(`bigint value ${value} is outside the safe integer range`);
    return parsed;
  },
};

/** `numeric` columns (exact, possibly fractional costs) as numbers. */
export const numericToNumber: ValueTransformer = {
  to: (value: number | null | undefined) => value,
  from: (value: string | null): number | null => (value === null || value === undefined ? null : Number(value)),
};
