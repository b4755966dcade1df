import type { NextFunction, Request, Response } from 'express';
import { ApiError } from '../common/errors/api-error';

/** A dashboard form's fields as a browser sends them: a text, or several for a field sent more than once. */
export type FormFields = Record<string, string | string[] | undefined>;

/** The fields a form sends several times (a group of checkboxes); any other is sent once. */
const LIST_FIELDS = new Set(['allowed_models', 'allowed_assistants']);

/**
 * On every page request, after the body parsers: a form's fields are texts (several only for
 * the LIST_FIELDS). A body posted as JSON could hold anything, and a handler that trims a
 * number or a list answered 500; here anything else (a number, true, an object, a field sent
 * twice) is refused with a 400 naming the field, before any handler reads it. A null is taken
 * as absent (the playground's script sends one).
 */
export function formFieldsMiddleware(req: Request, _res: Response, next: NextFunction): void {
  const body: unknown = req.body;
  if (body === undefined || body === null) return next();
  if (typeof body !== 'object' || Array.isArray(body)) {
    return next(ApiError.badRequest('A form is sent as fields with names: a JSON body is an object of texts.', 'body'));
  }
  const fields = body as Record<string, unknown>;
  for (const [name, value] of Object.entries(fields)) {
    if (value === null) delete fields[name];
    else if (Array.isArray(value) && !LIST_FIELDS.has(name)) return next(ApiError.badRequest(`The field ${name} is sent once.`, name));
    else if (typeof value !== 'string' && !(Array.isArray(value) && value.every((item) => typeof item === 'string'))) {
      return next(ApiError.badRequest(`The field ${name} must be text.`, name));
    }
  }
  next();
}

/** A field that a form sends once: its text ('' when absent); sent several times, a 400 naming it. */
export function formText(form: FormFields, name: string): string {
  const value = form[name];
  if (Array.isArray(value)) throw ApiError.badRequest(`The field ${name} is sent once.`, name);
  return value ?? '';
}

/** A field that a form may send several times (LIST_FIELDS): its texts, none when absent. */
export function formList(form: FormFields, name: string): string[] {
  const value = form[name];
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}
