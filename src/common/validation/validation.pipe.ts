import { ValidationError, ValidationPipe } from '@nestjs/common';
import { ApiError } from '../errors/api-error';

/**
 * Validates every DTO. Unknown body fields are let through (OpenAI clients send fields we
 * do not model); the first problem is reported with `param` naming the field, as OpenAI does.
 */
export function createValidationPipe(): ValidationPipe {
  return new ValidationPipe({
    transform: true,
    whitelist: false,
    forbidUnknownValues: false,
    stopAtFirstError: true,
    exceptionFactory: toValidationError,
  });
}

/** The first problem found, as OpenAI reports it: one message, and the field at fault in `param`. */
export function toValidationError(errors: ValidationError[]): ApiError {
  const { param, message } = firstProblem(errors);
  return ApiError.badRequest(message, param, 'invalid_value');
}

function firstProblem(errors: ValidationError[], prefix = ''): { param: string; message: string } {
  const error = errors[0];
  const param = prefix ? `${prefix}.${error.property}` : error.property;
  if (error.constraints && Object.keys(error.constraints).length > 0) {
    return { param, message: Object.values(error.constraints)[0] };
  }
  if (error.children && error.children.length > 0) return firstProblem(error.children, param);
  return { param, message: `${param} is invalid` };
}
