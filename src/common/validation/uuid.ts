import { isUUID } from 'class-validator';
import { ApiError } from '../errors/api-error';

/** Ids from the CLI and path parameters are checked before they reach a `uuid` column. */
export function assertUuid(value: string, param: string): void {
  if (!isUUID(value)) throw ApiError.badRequest(`${param} must be a UUID (got "${value}").`, param);
}
