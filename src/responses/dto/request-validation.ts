import { applyDecorators } from '@nestjs/common';
import { getMetadataStorage, registerDecorator, ValidateNested, validateSync, ValidationError } from 'class-validator';
import { ApiError } from '../../common/errors/api-error';

/**
 * How the Responses request's DTO classes validate a body and word a refusal as OpenAI does:
 * one message naming the field, `param` its dotted path, and a `code` when the refusal has one
 * (`unsupported_parameter`, `unsupported_tool`...).
 */

/**
 * What is wrong with a field. `at` names a field below it (`"3"`, an item of an array; a
 * metadata key) or, as `".."`, the object holding it. The message is read after the field's
 * path: `"must be a string."` or `": why"`.
 */
export interface Problem {
  message: string;
  code?: string;
  at?: string;
}

type ProblemOf = (value: unknown, object: Record<string, unknown>) => Problem | null;

/** The checks of every field, by constraint name, to find a refusal's code and place again from the failing value. */
const CHECKS = new Map<string, ProblemOf>();

/**
 * A field's check: `problemOf` says what is wrong with its value (null when nothing is), and
 * may read the object holding it (a field that depends on another). It runs on absent values
 * too: add `@IsOptional()` when absent is fine.
 */
export function Check(problemOf: ProblemOf): PropertyDecorator {
  return (target, property) => {
    const name = `${target.constructor.name}.${String(property)}`;
    CHECKS.set(name, problemOf);
    registerDecorator({
      name,
      target: target.constructor,
      propertyName: String(property),
      validator: {
        validate: (value, args) => problemOf(value, args!.object as Record<string, unknown>) === null,
        defaultMessage: (args) => problemOf(args!.value, args!.object as Record<string, unknown>)?.message ?? 'is invalid.',
      },
    });
  };
}

type DtoClass = new () => object;

/** The DTO class of each nested field, by class: what `instantiate` builds. */
const NESTED = new Map<DtoClass, Map<string, () => DtoClass>>();

/**
 * A field holding a DTO, or an array of them: validated with that class. Instead of
 * class-transformer's `@Type`, which copies the whole body and throws on a nested
 * `"constructor"` key (a property of a tool's JSON Schema): `instantiate` only gives the
 * nested objects their class and leaves every other value as the client sent it.
 */
export function Nested(type: () => DtoClass): PropertyDecorator {
  return applyDecorators(ValidateNested({ each: true, message: 'must be an object.' }), (target: object, property: string | symbol) => {
    const owner = target.constructor as DtoClass;
    const fields = NESTED.get(owner) ?? new Map<string, () => DtoClass>();
    fields.set(String(property), type);
    NESTED.set(owner, fields);
  });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * `fields` as an instance of `type` (a shallow copy), its `@Nested` fields' objects as
 * instances of theirs. `__proto__` keys never get here: the input guard refuses them.
 */
export function instantiate<T extends object>(type: new () => T, fields: Record<string, unknown>): T {
  const instance = Object.assign(Object.create(type.prototype) as T, fields) as Record<string, unknown>;
  for (const [field, typeOf] of NESTED.get(type) ?? []) {
    const value = instance[field];
    const nested = (item: unknown) => (isObject(item) ? instantiate(typeOf(), item) : item);
    if (Array.isArray(value)) instance[field] = value.map(nested);
    else instance[field] = nested(value);
  }
  return instance as T;
}

/** The fields a DTO class validates (every field has at least one decorator): any other is unknown. */
export function fieldsOf(type: DtoClass): Set<string> {
  return new Set(getMetadataStorage().getTargetValidationMetadatas(type, '', true, false).map((metadata) => metadata.propertyName));
}

/** Validates `fields` with `type`: the instance, or the first problem as a 400. */
export function validated<T extends object>(type: new () => T, fields: Record<string, unknown>): T {
  const instance = instantiate(type, fields);
  const errors = validateSync(instance, { stopAtFirstError: true, forbidUnknownValues: false });
  if (errors.length > 0) throw refusalOf(errors);
  return instance;
}

/** The first problem found, as OpenAI words it: `param` the field's path, the message after it. */
function refusalOf(errors: ValidationError[], path: string[] = []): ApiError {
  const error = errors[0];
  const at = [...path, error.property];
  const [constraint, message] = Object.entries(error.constraints ?? {})[0] ?? [];
  if (constraint === undefined) {
    if (error.children && error.children.length > 0) return refusalOf(error.children, at);
    return ApiError.badRequest(`${at.join('.')} is invalid.`, at.join('.'));
  }
  const check = CHECKS.get(constraint);
  const problem: Problem = check?.(error.value, error.target as Record<string, unknown>) ?? { message };
  if (problem.at === '..') at.pop();
  else if (problem.at !== undefined) at.push(problem.at);
  const param = at.join('.');
  const separator = problem.message.startsWith(':') ? '' : ' ';
  return ApiError.badRequest(`${param}${separator}${problem.message}`, param, problem.code);
}
