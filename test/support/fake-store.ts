import { ApiError } from '../../src/common/errors/api-error';

/** A fake store's method that the rule under test must not call. */
export function unused(): never {
  throw new Error('not used by this rule');
}

/** The ApiError a service's promise was refused with (fails the test if it resolved or threw something else). */
export async function refusal(promise: Promise<unknown>): Promise<ApiError> {
  const error: unknown = await promise.then(
    () => null,
    (reason: unknown) => reason,
  );
  if (!(error instanceof ApiError)) throw new Error(`expected an ApiError, got ${String(error)}`);
  return error;
}
