import { ApiError } from '../common/errors/api-error';

/** OpenAI's bounds of one request: inputs in one call, and tokens over all of them. */
export const MAX_EMBEDDING_INPUTS = 2_048;
export const MAX_EMBEDDING_REQUEST_TOKENS = 300_000;
/** The longest `user` kept, as chat keeps `user_id`. */
const MAX_USER_LENGTH = 256;

export type EncodingFormat = 'float' | 'base64';

/** A `POST /v1/embeddings` body, checked: its inputs are texts or token arrays, never a mix. */
export interface EmbeddingRequest {
  model: string;
  input: string[] | number[][];
  /** Whether the inputs are token arrays (an array of integers, or an array of them). */
  tokens: boolean;
  dimensions?: number;
  encodingFormat: EncodingFormat;
  user?: string;
}

/**
 * Reads a body as OpenAI does: `input` a string, an array of strings, an array of integers
 * (one token array) or an array of token arrays, none empty, at most 2048 of them; `model` a
 * name; `dimensions` a whole number >= 1 (the model bounds it: see EmbeddingsService);
 * `encoding_format` `float` (the default) or `base64`; `user` a string. Other fields are
 * ignored, as OpenAI clients send some we do not model. Every refusal is a 400 naming its field.
 */
export function parseEmbeddingRequest(body: unknown): EmbeddingRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw ApiError.badRequest('The request body must be a JSON object with `model` and `input`.', undefined, 'invalid_body');
  }
  const fields = body as Record<string, unknown>;
  const { model, dimensions, encoding_format: encodingFormat, user } = fields;
  if (typeof model !== 'string' || model.trim() === '') throw ApiError.badRequest('model is required: the name of an embedding model (GET /v1/models).', 'model');
  const { input, tokens } = parseInput(fields.input);
  if (dimensions !== undefined && dimensions !== null && (typeof dimensions !== 'number' || !Number.isSafeInteger(dimensions) || dimensions < 1)) {
    throw ApiError.badRequest('dimensions must be a whole number >= 1.', 'dimensions');
  }
  if (encodingFormat !== undefined && encodingFormat !== null && encodingFormat !== 'float' && encodingFormat !== 'base64') {
    throw ApiError.badRequest("encoding_format must be 'float' or 'base64'.", 'encoding_format');
  }
  if (user !== undefined && user !== null && typeof user !== 'string') throw ApiError.badRequest('user must be a string.', 'user');
  return {
    model,
    input,
    tokens,
    ...(typeof dimensions === 'number' ? { dimensions } : {}),
    encodingFormat: encodingFormat === 'base64' ? 'base64' : 'float',
    ...(typeof user === 'string' && user !== '' ? { user: user.slice(0, MAX_USER_LENGTH) } : {}),
  };
}

function parseInput(input: unknown): { input: string[] | number[][]; tokens: boolean } {
  const refuse = (message: string, code = 'invalid_input') => ApiError.badRequest(message, 'input', code);
  if (input === undefined || input === null) throw refuse('input is required: a string, an array of strings, a token array or an array of token arrays.');
  if (typeof input === 'string') {
    if (input === '') throw refuse('input must not be an empty string.');
    return { input: [input], tokens: false };
  }
  if (!Array.isArray(input)) throw refuse('input must be a string, an array of strings, a token array or an array of token arrays.');
  if (input.length === 0) throw refuse('input must not be an empty array.');
  if (input.every((item) => typeof item === 'number')) {
    checkTokens(input, 'input');
    return { input: [input as number[]], tokens: true };
  }
  if (input.length > MAX_EMBEDDING_INPUTS) throw refuse(`input can have at most ${MAX_EMBEDDING_INPUTS} items (got ${input.length}).`, 'array_too_long');
  if (input.every((item) => typeof item === 'string')) {
    const empty = input.findIndex((item) => item === '');
    if (empty >= 0) throw refuse(`input[${empty}] must not be an empty string.`);
    return { input: input as string[], tokens: false };
  }
  if (input.every((item) => Array.isArray(item))) {
    input.forEach((item: unknown[], index) => {
      if (item.length === 0) throw refuse(`input[${index}] must not be an empty token array.`);
      checkTokens(item, `input[${index}]`);
    });
    return { input: input as number[][], tokens: true };
  }
  throw refuse('input must be all strings or all token arrays, not a mix.');
}

/** Token ids are whole numbers >= 0. */
function checkTokens(tokens: unknown[], at: string): void {
  const bad = tokens.findIndex((token) => typeof token !== 'number' || !Number.isSafeInteger(token) || token < 0 || token > 0xffffffff);
  if (bad >= 0) throw ApiError.badRequest(`${at}[${bad}] must be a token id (a whole number >= 0).`, 'input', 'invalid_input');
}
