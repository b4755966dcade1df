import 'reflect-metadata';
import { ApiError } from '../common/errors/api-error';
import { parseChatRequest } from './chat-request';

const parse = (json: string) => parseChatRequest(JSON.parse(json), { assistantMode: false });

describe('parseChatRequest', () => {
  it('says what is wrong with a request even when an object in it has a key named "constructor"', async () => {
    const refused = parse(
      JSON.stringify({
        model: 'gpt-4o-mini',
        messages: [{ role: 'usr', content: 'hi' }],
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { constructor: { type: 'string' } } } } }],
      }),
    );
    await expect(refused).rejects.toBeInstanceOf(ApiError);
    await expect(refused).rejects.toMatchObject({ status: 400, param: 'messages.0.role' });
  });

  it('forwards such a key of a well-formed request as it came', async () => {
    const properties = { constructor: { type: 'string' }, toString: { type: 'string' } };
    const request = await parse(
      JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties } } }] }),
    );
    expect(JSON.parse(JSON.stringify(request.tools))).toEqual([{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties } } }]);
  });

  it('keeps a top-level "__proto__" key a key: it sets neither n nor anything else', async () => {
    const request = await parse('{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "__proto__": {"n": 7}}');
    expect(request.choices).toBe(1);
    expect(Object.getPrototypeOf(request.extra)).toBe(Object.prototype);
    expect(Object.keys(request.extra)).toEqual(['__proto__']);
  });

  it('takes a request the hand check is too strict for through the decorators: a model name of 150 emoji (300 UTF-16 units, at most 200 characters)', async () => {
    const model = '\u{1F600}'.repeat(150);
    const request = await parse(JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }));
    expect(request.dto.model).toBe(model);
    expect(request.maxTokens).toBe(5);
    expect(request.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });
});
