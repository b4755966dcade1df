import { registerDecorator, ValidationArguments } from 'class-validator';

export const MAX_METADATA_KEYS = 16;
export const MAX_METADATA_KEY_LENGTH = 64;
export const MAX_METADATA_VALUE_LENGTH = 512;

/**
 * OpenAI's `metadata`: a JSON object of at most 16 keys (each at most 64 characters) with
 * string values of at most 512 characters. `null` is refused: send `{}` to clear it.
 */
export function IsMetadata(): PropertyDecorator {
  return (target, propertyName) =>
    registerDecorator({
      name: 'isMetadata',
      target: target.constructor,
      propertyName: propertyName as string,
      validator: {
        validate: (value: unknown) => metadataProblem(value) === null,
        defaultMessage: (args: ValidationArguments) => `${args.property} ${metadataProblem(args.value)}`,
      },
    });
}

export function metadataProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return 'must be an object of string values (send {} to clear it)';
  }
  const entries = Object.entries(value);
  if (entries.length > MAX_METADATA_KEYS) return `can have at most ${MAX_METADATA_KEYS} keys (got ${entries.length})`;
  for (const [key, item] of entries) {
    if (key.length === 0 || key.length > MAX_METADATA_KEY_LENGTH) {
      return `keys must be 1 to ${MAX_METADATA_KEY_LENGTH} characters (got "${key.slice(0, 80)}")`;
    }
    if (typeof item !== 'string') return `values must be strings (the value of "${key}" is not)`;
    if (item.length > MAX_METADATA_VALUE_LENGTH) {
      return `values must be at most ${MAX_METADATA_VALUE_LENGTH} characters (the value of "${key}" has ${item.length})`;
    }
  }
  return null;
}
