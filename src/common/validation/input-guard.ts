import type { NextFunction, Response } from 'express';
import { LONE_SURROGATE } from '../database/storable';
import { ApiError } from '../errors/api-error';
import type { ApiRequest } from '../http/request-context';

/**
 * Deepest nesting accepted in a JSON body or a query string. OpenAI requests nest a few
 * levels (a tool's JSON Schema a few more); past this, a body is an attack on the stack of
 * whatever walks it next (class-transformer recursed until it overflowed).
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Most JSON values (objects, arrays, strings, numbers...) in one body. A long chat history
 * holds a few tens of thousands; the cap bounds the work of class-transformer and
 * class-validator, which copy and check every value (10 MB of `[0,0,...]` took 1.8 s).
 */
export const MAX_JSON_VALUES = 100_000;

/** A problem found in a request's input, reported as a 400 naming the field at fault. */
export interface InputProblem {
  param: string;
  message: string;
  code: 'invalid_string' | 'invalid_key' | 'nesting_too_deep' | 'too_many_values';
}

/** A field's place in the input, linked to its parent so paths are only built for an error. */
interface Place {
  parent: Place | null;
  key: string;
}

/**
 * Walks a parsed JSON body or query string, without recursion (so no input can overflow a
 * stack), for what no later step can store or handle safely:
 * - U+0000 or an unpaired UTF-16 surrogate in a string or a key: PostgreSQL refuses NUL in
 *   `text` and `jsonb`, and lone surrogates in `jsonb`, only once the request has run;
 * - the key `__proto__`, which object spreads and class-transformer drop without a word;
 * - nesting deeper than MAX_JSON_DEPTH, or more than MAX_JSON_VALUES values.
 * Returns the first problem found, or null.
 */
export function findInputProblem(input: unknown): InputProblem | null {
  const pending: Array<{ value: unknown; place: Place | null; depth: number }> = [{ value: input, place: null, depth: 0 }];
  // Counted as they are found, so that a huge array is refused before its items are queued.
  let values = 1;
  while (pending.length > 0) {
    const { value, place, depth } = pending.pop()!;
    if (typeof value === 'string') {
      const problem = stringProblem(value);
      if (problem) return { param: pathOf(place), message: `${pathOf(place)} ${problem}`, code: 'invalid_string' };
      continue;
    }
    if (typeof value !== 'object' || value === null) continue;
    if (depth >= MAX_JSON_DEPTH) {
      return {
        param: pathOf(place),
        message: `${pathOf(place)} is nested too deeply: at most ${MAX_JSON_DEPTH} levels of objects and arrays are accepted.`,
        code: 'nesting_too_deep',
      };
    }
    if (Array.isArray(value)) {
      values += value.length;
      if (values > MAX_JSON_VALUES) return tooManyValues(place);
      for (let index = value.length - 1; index >= 0; index--) {
        pending.push({ value: value[index], place: { parent: place, key: String(index) }, depth: depth + 1 });
      }
      continue;
    }
    const keys = Object.keys(value);
    values += keys.length;
    if (values > MAX_JSON_VALUES) return tooManyValues(place);
    for (let index = keys.length - 1; index >= 0; index--) {
      const key = keys[index];
      const at: Place = { parent: place, key };
      if (key === '__proto__') {
        return { param: pathOf(at), message: `${pathOf(at)}: "__proto__" is not accepted as a key.`, code: 'invalid_key' };
      }
      const problem = stringProblem(key);
      if (problem) return { param: pathOf(at), message: `The key ${pathOf(at)} ${problem}`, code: 'invalid_string' };
      pending.push({ value: (value as Record<string, unknown>)[key], place: at, depth: depth + 1 });
    }
  }
  return null;
}

/** Names the top-level field holding the excess, not the one value where the count ran out. */
function tooManyValues(place: Place | null): InputProblem {
  let top = place;
  while (top?.parent) top = top.parent;
  const field = pathOf(top);
  return {
    param: field,
    message: `The request holds more than ${MAX_JSON_VALUES} JSON values (objects, arrays, strings, numbers...), too many of them in ${field}.`,
    code: 'too_many_values',
  };
}


function stringProblem(text: string): string | null {
  if (text.includes('\u0000')) return 'contains a NUL character (U+0000), which cannot be stored.';
  if (LONE_SURROGATE.test(text)) return 'contains an unpaired UTF-16 surrogate (such as \\ud800 alone), which is not valid Unicode.';
  return null;
}

/** The dotted path of a field (`messages.0.content`), readable even when a key is the problem. */
function pathOf(place: Place | null): string {
  const keys: string[] = [];
  for (let at = place; at; at = at.parent) keys.push(at.key.replace(/\u0000/g, '\\u0000').replace(new RegExp(LONE_SURROGATE, 'g'), '\ufffd'));
  return keys.length > 0 ? keys.reverse().join('.') : 'body';
}

/**
 * Runs right after the JSON body parser, for every route: a body or a query string with a
 * problem is refused before validation, authentication or any handler sees it.
 */
export function inputGuardMiddleware(req: ApiRequest, _res: Response, next: NextFunction): void {
  const problem = findInputProblem(req.query) ?? findInputProblem(req.body);
  next(problem ? ApiError.badRequest(problem.message, problem.param, problem.code) : undefined);
}
