import { applyDecorators } from '@nestjs/common';
import { ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import { IsIn, IsInt, IsNumber, IsOptional, IsString, IsUUID, Max, MaxLength, Min } from 'class-validator';

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

/*
 * class-validator runs a field's own decorators bottom-up, so `@IsString() @MaxLength(512)`
 * told `{"title": 5}` that it "must be shorter than 512 characters". These check the type
 * first, whatever order they are written in.
 */

/** A string of at most `max` characters. */
export function IsStringOfAtMost(max: number) {
  return applyDecorators(
    IsString({ message: '$property must be a string' }),
    MaxLength(max, { message: `$property must be at most ${max} characters` }),
  );
}

/** An integer (a JSON number: "5" is refused, as OpenAI refuses it) of at least `min`. */
export function IsIntegerOfAtLeast(min: number) {
  return applyDecorators(
    IsInt({ message: '$property must be an integer' }),
    Min(min, { message: `$property must be at least ${min}` }),
  );
}

/** A number (not a numeric string) from `min` to `max`. */
export function IsNumberBetween(min: number, max: number) {
  return applyDecorators(
    IsNumber({}, { message: '$property must be a number' }),
    Min(min, { message: `$property must be at least ${min}` }),
    Max(max, { message: `$property must be at most ${max}` }),
  );
}
