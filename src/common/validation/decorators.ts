import { applyDecorators } from '@nestjs/common';
import { ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsIn, IsInt, IsOptional, IsString, IsUUID, Max, Min } from 'class-validator';

/**
 * Composite decorators: validation, transformation and the Swagger description of a
 * field in one place, so the docs cannot drift from what is enforced.
 */
export function OptionalInt(options: { min: number; max: number; default?: number; description: string }) {
  return applyDecorators(
    ApiPropertyOptional({
      type: Number,
      minimum: options.min,
      maximum: options.max,
      default: options.default,
      description: options.description,
    }),
    IsOptional(),
    Type(() => Number),
    IsInt({ message: '$property must be an integer' }),
    Min(options.min, { message: `$property must be at least ${options.min}` }),
    Max(options.max, { message: `$property must be at most ${options.max}` }),
  );
}

export function OptionalUuid(description: string) {
  return applyDecorators(
    ApiPropertyOptional({ type: String, format: 'uuid', description }),
    IsOptional(),
    IsUUID('all', { message: '$property must be a UUID' }),
  );
}

export function OptionalEnum(values: readonly string[], description: string) {
  return applyDecorators(
    ApiPropertyOptional({ enum: values, description }),
    IsOptional(),
    IsString(),
    IsIn(values as string[], { message: `$property must be one of ${values.join(', ')}` }),
  );
}
