import { ApiError } from '../common/errors/api-error';
import { MAX_EMBEDDING_INPUTS, parseEmbeddingRequest } from './embedding-request';

const model = 'text-embedding-3-small';

function refusal(body: unknown): { param: string | null | undefined; message: string } {
  try {
    parseEmbeddingRequest(body);
  } catch (error) {
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).type).toBe('bad_request');
    return { param: (error as ApiError).param, message: (error as ApiError).message };
  }
  throw new Error('not refused');
}

describe('parseEmbeddingRequest', () => {
  it('reads every input form of OpenAI', () => {
    expect(parseEmbeddingRequest({ model, input: 'Hello' })).toEqual({ model, input: ['Hello'], tokens: false, encodingFormat: 'float' });
    expect(parseEmbeddingRequest({ model, input: ['a', 'b'] })).toMatchObject({ input: ['a', 'b'], tokens: false });
    expect(parseEmbeddingRequest({ model, input: [1, 2, 3] })).toMatchObject({ input: [[1, 2, 3]], tokens: true });
    expect(parseEmbeddingRequest({ model, input: [[1], [2, 3]] })).toMatchObject({ input: [[1], [2, 3]], tokens: true });
    // One token array is one input, however long.
    expect(parseEmbeddingRequest({ model, input: Array.from({ length: 5_000 }, (_, i) => i) }).input).toHaveLength(1);
  });

  it('reads dimensions, encoding_format and user, and ignores fields it does not model', () => {
    expect(parseEmbeddingRequest({ model, input: 'x', dimensions: 256, encoding_format: 'base64', user: 'u-1', extra_body_field: true })).toEqual({
      model,
      input: ['x'],
      tokens: false,
      dimensions: 256,
      encodingFormat: 'base64',
      user: 'u-1',
    });
    expect(parseEmbeddingRequest({ model, input: 'x', dimensions: null, encoding_format: null, user: null })).toEqual({ model, input: ['x'], tokens: false, encodingFormat: 'float' });
  });

  it.each([
    [null, undefined],
    [[], undefined],
    [{ input: 'x' }, 'model'],
    [{ model: '', input: 'x' }, 'model'],
    [{ model: 7, input: 'x' }, 'model'],
    [{ model }, 'input'],
    [{ model, input: '' }, 'input'],
    [{ model, input: [] }, 'input'],
    [{ model, input: ['a', ''] }, 'input'],
    [{ model, input: ['a', 1] }, 'input'],
    [{ model, input: [[1], 'a'] }, 'input'],
    [{ model, input: [[]] }, 'input'],
    [{ model, input: [1.5] }, 'input'],
    [{ model, input: [-1] }, 'input'],
    [{ model, input: [[1, 'x']] }, 'input'],
    [{ model, input: { text: 'x' } }, 'input'],
    [{ model, input: 42 }, 'input'],
    [{ model, input: Array.from({ length: MAX_EMBEDDING_INPUTS + 1 }, () => 'a') }, 'input'],
    [{ model, input: 'x', dimensions: 0 }, 'dimensions'],
    [{ model, input: 'x', dimensions: 1.5 }, 'dimensions'],
    [{ model, input: 'x', dimensions: '256' }, 'dimensions'],
    [{ model, input: 'x', encoding_format: 'int8' }, 'encoding_format'],
    [{ model, input: 'x', user: 42 }, 'user'],
  ])('refuses %j with a 400 naming %s', (body, param) => {
    expect(refusal(body).param ?? undefined).toBe(param);
  });

  it('takes 2048 inputs, the most OpenAI takes', () => {
    expect(parseEmbeddingRequest({ model, input: Array.from({ length: MAX_EMBEDDING_INPUTS }, () => 'a') }).input).toHaveLength(MAX_EMBEDDING_INPUTS);
  });
});
