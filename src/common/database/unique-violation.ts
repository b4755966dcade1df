/** PostgreSQL's SQLSTATE for a unique constraint a write would break. */
const UNIQUE_VIOLATION = '23505';

/** Whether `error` is PostgreSQL refusing a write that would break a unique constraint (as the driver or TypeORM reports it). */
export function isUniqueViolation(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === UNIQUE_VIOLATION;
}
